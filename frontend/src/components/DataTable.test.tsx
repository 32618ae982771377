import { render, screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import { ApiError } from "../api";
import { DataTable } from "./DataTable";

type Key = { name: string; bits: number };

function keysTable(props: { rows: Key[]; loading?: boolean; error?: unknown; retry?: () => void }) {
  return (
    <DataTable
      label="SSH keys"
      what="your keys"
      rows={props.rows}
      loading={props.loading ?? false}
      error={props.error}
      retry={props.retry}
      empty="No SSH key yet."
      columns={
        <>
          <th>Name</th>
          <th>Bits</th>
        </>
      }
      row={(key) => (
        <tr key={key.name}>
          <td>{key.name}</td>
          <td>{key.bits}</td>
        </tr>
      )}
      footer={
        <tr>
          <th>Total</th>
          <th>{props.rows.reduce((sum, key) => sum + key.bits, 0)}</th>
        </tr>
      }
    />
  );
}

describe("a data table", () => {
  it("says it is loading until the first answer, and not that the list is empty", () => {
    render(keysTable({ rows: [], loading: true }));
    expect(screen.getByRole("status")).toHaveTextContent("Loading your keys…");
    expect(screen.queryByText("No SSH key yet.")).not.toBeInTheDocument();
    expect(screen.queryByRole("table")).not.toBeInTheDocument();
  });

  it("says so when there is no row", () => {
    render(keysTable({ rows: [] }));
    expect(screen.getByText("No SSH key yet.")).toHaveClass("empty");
    expect(screen.queryByRole("table")).not.toBeInTheDocument();
  });

  it("shows one row per item under its header, with its footer", () => {
    render(keysTable({ rows: [{ name: "laptop", bits: 256 }, { name: "desktop", bits: 4096 }] }));
    const table = screen.getByRole("table", { name: "SSH keys" });
    const rows = within(table).getAllByRole("row");
    expect(rows.map((row) => row.textContent)).toEqual(["NameBits", "laptop256", "desktop4096", "Total4352"]);
  });

  it("shows the error above the rows it still has, and retries when asked", async () => {
    const retry = vi.fn();
    render(keysTable({ rows: [{ name: "laptop", bits: 256 }], error: new ApiError(500, "The server failed."), retry }));
    expect(screen.getByRole("alert")).toHaveTextContent("The server failed.");
    expect(screen.getByRole("table", { name: "SSH keys" })).toHaveTextContent("laptop");
    await userEvent.click(screen.getByRole("button", { name: "Retry" }));
    expect(retry).toHaveBeenCalledOnce();
  });
});
