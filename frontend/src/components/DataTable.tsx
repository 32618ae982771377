import type { ReactNode } from "react";
import { Empty, ErrorBox, Loading } from "./common";

/** A list shown as a table, or what stands in its place: its error above it (with Retry
 * when `retry` is given), "Loading {what}…" until the first answer, `empty` when there is
 * no row. A refresh keeps the rows on screen (`loading` is only for the first answer). */
export function DataTable<Row>({
  label,
  what,
  rows,
  loading,
  error,
  retry,
  empty,
  columns,
  row,
  footer,
  className,
}: {
  /** The table's accessible name. */
  label: string;
  /** What is being loaded, as "Loading {what}…" says it. */
  what: string;
  rows: readonly Row[];
  /** True while nothing has come yet. */
  loading: boolean;
  error?: unknown;
  retry?: () => void;
  /** What stands in for a table with no row. */
  empty: ReactNode;
  /** The header row's cells. */
  columns: ReactNode;
  /** One item's table row (or rows), keyed. */
  row: (item: Row) => ReactNode;
  /** The footer's row, if the table has one. */
  footer?: ReactNode;
  className?: string;
}) {
  return (
    <>
      <ErrorBox error={error} retry={retry} />
      {loading ? (
        <Loading what={what} />
      ) : rows.length === 0 ? (
        <Empty>{empty}</Empty>
      ) : (
        <div className="table-wrap">
          <table className={className} aria-label={label}>
            <thead>
              <tr>{columns}</tr>
            </thead>
            <tbody>{rows.map(row)}</tbody>
            {footer && <tfoot>{footer}</tfoot>}
          </table>
        </div>
      )}
    </>
  );
}
