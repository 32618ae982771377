import { useState } from "react";
import { useSearchParams } from "react-router";
import type { Schemas } from "../api";
import { useMe } from "../auth";
import { Empty, ErrorBox, Loading } from "../components/common";
import { DataTable } from "../components/DataTable";
import {
  actOnStorageRoot,
  useExpiringFiles,
  useExpiryRuns,
  useLargestPaths,
  useScans,
  useStorageRoots,
  useStorageUsage,
} from "../endpoints";
import { size, when } from "../format";

type StorageRoot = Schemas["StorageRoot"];
type Scan = Schemas["Scan"];

/** Usage of storage roots from the storage manager's snapshots, scoped as the API is:
 * people see their own, VC admins their VCs', cluster admins everything. */
export function StoragePage() {
  const me = useMe();
  const [params, setParams] = useSearchParams();
  const roots = useStorageRoots();
  const chosen = params.get("root") ?? roots.data?.[0]?.name ?? null;
  const root = roots.data?.find((one) => one.name === chosen);
  const scans = useScans(chosen ? `root__name=${enc(chosen)}&page_size=20` : null, 10000);
  const finished = (scans.data?.results ?? []).filter((scan) => scan.status === "done");
  const running = (scans.data?.results ?? []).find((scan) => scan.status === "running");
  const [latest, previous] = finished;
  const [notice, setNotice] = useState<string>("");
  const [failure, setFailure] = useState<unknown>(null);

  async function queue(what: "scan" | "expiry-dry-run") {
    if (!chosen) return;
    setFailure(null);
    try {
      const answer = await actOnStorageRoot(chosen, what);
      setNotice(answer.detail);
      scans.reload();
    } catch (reason) {
      setFailure(reason);
    }
  }

  if (roots.loading && !roots.data) return <Loading what="storage" />;
  return (
    <section>
      <div className="heading">
        <h1>Storage</h1>
        {roots.data && roots.data.length > 1 && (
          <label className="inline">
            Root{" "}
            <select value={chosen ?? ""} onChange={(e) => setParams({ root: e.target.value })} aria-label="Storage root">
              {roots.data.map((one) => (
                <option key={one.name} value={one.name}>
                  {one.name}
                </option>
              ))}
            </select>
          </label>
        )}
      </div>
      <ErrorBox error={roots.error || scans.error || failure} retry={roots.reload} />
      {!root ? (
        <Empty>No storage root is configured yet. A cluster admin adds them with the storage API.</Empty>
      ) : (
        <>
          <p className="snapshot" aria-label="Snapshot">
            <strong>{root.name}</strong> ({root.kind}, <code>{root.path}</code>):{" "}
            {!scans.data ? (
              "loading its snapshots…"
            ) : latest ? (
              <>
                snapshot taken <strong>{when(latest.finished_at)}</strong> ({size(latest.bytes_seen)} in{" "}
                {latest.files_seen.toLocaleString()} files)
              </>
            ) : (
              "no finished scan yet"
            )}
            {running && (
              <span role="status">
                {" "}
                · scanning now: {running.files_seen.toLocaleString()} files, {size(running.bytes_seen)} so far
              </span>
            )}
          </p>
          <div className="toolbar">
            <a className="button" href={`/api/v1/storage/usage/export/?root=${enc(root.name)}`} download>
              Download CSV
            </a>
            {me.is_cluster_admin && (
              <>
                <button type="button" onClick={() => queue("scan")}>
                  Scan now
                </button>
                {root.expiry_days !== null && (
                  <button type="button" onClick={() => queue("expiry-dry-run")}>
                    Run an expiry dry run
                  </button>
                )}
              </>
            )}
            {notice && (
              <span className="ok" role="status">
                {notice}
              </span>
            )}
          </div>
          {latest && (
            <>
              <UsageTable root={root.name} kind="user" title="Usage by user" latest={latest} previous={previous} />
              <UsageTable root={root.name} kind="vc" title="Usage by VC" latest={latest} previous={previous} />
              <LargestPaths root={root.name} />
            </>
          )}
          <Expiry root={root} />
        </>
      )}
    </section>
  );
}

function enc(value: string): string {
  return encodeURIComponent(value);
}

function change(now: number, before: number | undefined): string {
  if (before === undefined) return "new";
  const delta = now - before;
  if (delta === 0) return "no change";
  return `${delta > 0 ? "+" : "−"}${size(Math.abs(delta))}`;
}

function UsageTable({ root, kind, title, latest, previous }: { root: string; kind: string; title: string; latest: Scan; previous?: Scan }) {
  const base = `root=${enc(root)}&kind=${kind}&page_size=200`;
  const now = useStorageUsage(`${base}&scan=${latest.id}`);
  const before = useStorageUsage(previous ? `${base}&scan=${previous.id}` : null);
  const earlier = new Map((before.data?.results ?? []).map((row) => [row.key, row.bytes]));
  const rows = now.data?.results ?? [];
  const total = rows.reduce((sum, row) => sum + row.bytes, 0);
  const totalBefore = before.data ? before.data.results.reduce((sum, row) => sum + row.bytes, 0) : undefined;
  return (
    <>
      <h2>{title}</h2>
      <DataTable
        label={title}
        what={title.toLowerCase()}
        rows={rows}
        loading={now.loading && !now.data}
        error={now.error || before.error}
        empty="Nothing of yours in this snapshot."
        columns={
          <>
            <th>{kind === "vc" ? "VC" : "User"}</th>
            <th>Size</th>
            <th>Files</th>
            <th>{previous ? `Change since ${when(previous.finished_at)}` : "Change"}</th>
          </>
        }
        row={(row) => (
          <tr key={row.key}>
            <td>{row.key}</td>
            <td>{size(row.bytes)}</td>
            <td>{row.files.toLocaleString()}</td>
            <td>{previous ? change(row.bytes, earlier.get(row.key)) : "first snapshot"}</td>
          </tr>
        )}
        footer={
          <tr>
            <th>Total</th>
            <th>{size(total)}</th>
            <th />
            <th>{previous && totalBefore !== undefined ? change(total, totalBefore) : ""}</th>
          </tr>
        }
      />
    </>
  );
}

function LargestPaths({ root }: { root: string }) {
  const paths = useLargestPaths(`root=${enc(root)}&page_size=20`);
  const rows = paths.data?.results ?? [];
  return (
    <>
      <h2>Largest paths</h2>
      <ErrorBox error={paths.error} />
      {rows.length === 0 ? (
        !paths.loading && <Empty>No large file of yours in this snapshot.</Empty>
      ) : (
        <div className="table-wrap">
          <table aria-label="Largest paths">
            <thead>
              <tr>
                <th>Path</th>
                <th>Size</th>
                <th>Owner</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((row) => (
                <tr key={row.path}>
                  <td className="name" title={row.path}>
                    <code>{row.path}</code>
                  </td>
                  <td>{size(row.bytes)}</td>
                  <td>{row.user ?? "—"}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}

function Expiry({ root }: { root: StorageRoot }) {
  const runs = useExpiryRuns(`root__name=${enc(root.name)}&dry_run=true&page_size=1`);
  const files = useExpiringFiles(`root=${enc(root.name)}&page_size=100`);
  const run = runs.data?.results[0];
  const rows = files.data?.results ?? [];
  return (
    <>
      <h2>Expiry</h2>
      {root.expiry_days === null ? (
        <p className="hint">Files on {root.name} never expire.</p>
      ) : (
        <p className="hint">
          Files on {root.name} unused for {root.expiry_days} days are deleted; owners are warned {root.warn_days} days before.
          {run ? ` The newest dry run (${when(run.started_at)}) lists what would go:` : " No dry run has been made yet."}
        </p>
      )}
      <ErrorBox error={runs.error || files.error} />
      {run && rows.length === 0 && !files.loading && <Empty>None of your files would expire.</Empty>}
      {rows.length > 0 && (
        <div className="table-wrap">
          <table aria-label="Files that would expire">
            <thead>
              <tr>
                <th>Path</th>
                <th>Size</th>
                <th>Last used</th>
                <th>Expires</th>
                <th>Owner</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((row) => (
                <tr key={row.path}>
                  <td className="name" title={row.path}>
                    <code>{row.path}</code>
                  </td>
                  <td>{size(row.bytes)}</td>
                  <td>{when(row.last_used_at)}</td>
                  <td className={row.expired ? "urgent" : undefined}>{row.expired ? "now (expired)" : when(row.expires_at)}</td>
                  <td>{row.user ?? "—"}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}
