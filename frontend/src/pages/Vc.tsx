import { Link, NavLink, useParams } from "react-router";
import type { Schemas, Vc } from "../api";
import { isVcAdmin, useMe } from "../auth";
import { ErrorBox, Loading, StatusBadge } from "../components/common";
import { DataTable } from "../components/DataTable";
import { useJobs, useVc, useVcDeadlines, useVcQueue } from "../endpoints";
import { duration, memory, when } from "../format";
import { VcSettings } from "./VcSettings";

type QueueEntry = Schemas["QueuedJob"];

export function VcPage({ tab }: { tab: "overview" | "settings" }) {
  const { name = "" } = useParams();
  const me = useMe();
  const vc = useVc(name, tab === "overview" ? 10000 : 0);
  const admin = isVcAdmin(me, name);
  return (
    <section>
      <h1>VC {name}</h1>
      <nav className="tabs" aria-label="VC">
        <NavLink to={`/vcs/${name}`} end>
          Overview
        </NavLink>
        {admin && <NavLink to={`/vcs/${name}/settings`}>Settings</NavLink>}
      </nav>
      <ErrorBox error={vc.error} retry={vc.reload} />
      {vc.loading && !vc.data ? (
        <Loading what={`VC ${name}`} />
      ) : !vc.data ? null : tab === "settings" ? (
        admin ? (
          <VcSettings vc={vc.data} onSaved={vc.reload} />
        ) : (
          <div className="error" role="alert">
            Only admins of VC {name} can change its settings. Ask one of them, or a cluster admin.
          </div>
        )
      ) : (
        <VcOverview vc={vc.data} />
      )}
    </section>
  );
}

function VcOverview({ vc }: { vc: Vc }) {
  const queue = useVcQueue(vc.name, 10000);
  // Servers without the queue endpoint: the VC's waiting jobs, oldest first.
  const fallback = useJobs(
    queue.error ? `vc=${vc.name}&status=queued&status=unapproved&ordering=submitted_at&page_size=100` : null,
  );
  const entries: QueueEntry[] =
    queue.data ??
    (fallback.data?.results ?? []).map((job, index) => ({
      position: index + 1,
      job_id: job.id,
      name: job.name,
      owner: job.owner,
      gpu_type: job.gpu_type,
      workers: job.workers,
      gpus_per_worker: job.gpus_per_worker,
      priority: job.priority,
      preemptible: job.preemptible,
      submitted_at: job.submitted_at,
      not_before: null,
      status: job.status,
      status_message: job.status_message,
      // The jobs list carries no insight; the status message says why it waits.
      insight_message: "",
      estimated_start_at: job.estimated_start_at,
    }));
  return (
    <>
      {vc.description && <p className="lead">{vc.description}</p>}
      <p>
        Policy <strong>{vc.policy}</strong> · jobs run at most <strong>{duration(vc.max_wall_time)}</strong> · interactive GPUs at most{" "}
        {vc.max_interactive_gpus} · default retries {vc.default_max_retries}
      </p>
      <h2>Quota and use</h2>
      <div className="table-wrap">
        <table aria-label="Quota and use">
          <thead>
            <tr>
              <th>GPU type</th>
              <th>Quota GPUs</th>
              <th>Used</th>
              <th>Queued</th>
              <th>Borrowed</th>
              <th>Free in quota</th>
              <th>Idle in cluster</th>
              <th>CPUs used / quota</th>
              <th>Memory used / quota</th>
            </tr>
          </thead>
          <tbody>
            {(vc.resources ?? []).map((row) => (
              <tr key={row.gpu_type}>
                <td>{row.gpu_type}</td>
                <td>{row.quota.gpus}</td>
                <td>
                  <Meter used={row.used.gpus} total={row.quota.gpus} /> {row.used.gpus}
                </td>
                <td>
                  {row.queued.gpus}
                  {row.queued_jobs ? ` (${row.queued_jobs} jobs)` : ""}
                </td>
                <td>{row.borrowed_gpus ?? 0}</td>
                <td>{row.free.gpus}</td>
                <td>{row.cluster_idle_gpus}</td>
                <td>
                  {Number(row.used.cpus)} / {Number(row.quota.cpus)}
                </td>
                <td>
                  {memory(row.used.memory)} / {memory(row.quota.memory)}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <DeadlineFigure vc={vc.name} />
      <h2>Queue</h2>
      <DataTable
        label="Queue"
        what="the queue"
        rows={entries}
        loading={queue.loading && fallback.loading}
        empty="No job is waiting in this VC."
        columns={
          <>
            <th>#</th>
            <th>Job</th>
            <th>Owner</th>
            <th>Resources</th>
            <th>Priority</th>
            <th>Submitted</th>
            <th>Status</th>
            <th>Why it waits</th>
            <th>Estimated start</th>
          </>
        }
        row={(entry) => (
          <tr key={entry.job_id}>
            <td>{entry.position}</td>
            <td>
              <Link to={`/jobs/${entry.job_id}`}>{entry.name}</Link>
            </td>
            <td>{entry.owner}</td>
            <td>
              {entry.workers} x {entry.gpus_per_worker} {entry.gpu_type}
            </td>
            <td>{entry.priority}</td>
            <td>{when(entry.submitted_at)}</td>
            <td>
              <StatusBadge status={entry.status} />
            </td>
            <td>{entry.insight_message || entry.status_message}</td>
            <td>{when(entry.estimated_start_at)}</td>
          </tr>
        )}
      />
    </>
  );
}

/** The share of the VC's jobs with a deadline that met it (last 7 days), and those ahead. */
function DeadlineFigure({ vc }: { vc: string }) {
  const summary = useVcDeadlines(vc, 60000);
  const data = summary.data;
  if (!data || (data.ended === 0 && data.pending === 0)) return null;
  const rate = data.met_rate;
  return (
    <>
      <h2>Deadlines</h2>
      <p aria-label="Deadlines met">
        {rate === null ? (
          "No job with a deadline ended in the last 7 days"
        ) : (
          <>
            <span className="meter" role="img" aria-label={`${Math.round(rate * 100)}% of deadlines met`}>
              <span style={{ width: `${rate * 100}%` }} />
            </span>{" "}
            <strong>{data.met}</strong> of {data.ended} jobs with a deadline met it in the last 7 days ({Math.round(rate * 100)}%)
          </>
        )}
        ; {data.pending} still ahead{data.predicted_late ? `, ${data.predicted_late} predicted late` : ""}.
      </p>
    </>
  );
}

function Meter({ used, total }: { used: number; total: number }) {
  const share = total ? Math.min(1, used / total) : used ? 1 : 0;
  return (
    <span className="meter" role="img" aria-label={`${used} of ${total} used`}>
      <span style={{ width: `${share * 100}%` }} className={used > total ? "over" : ""} />
    </span>
  );
}
