import { useEffect, useState } from "react";
import { Link, useSearchParams } from "react-router";
import type { BatchResult, JobSummary as Job } from "../api";
import { useMe } from "../auth";
import { ErrorBox, StatusBadge } from "../components/common";
import { DataTable } from "../components/DataTable";
import { actOnJobArray, actOnJobs, type JobAction, useJobs } from "../endpoints";
import { duration, when } from "../format";
import { timeLeft } from "../format";
import { JOB_STATUSES } from "../jobStatuses";

const TYPES = ["batch", "distributed", "interactive", "inference"];
const SORTS: [string, string][] = [
  ["-submitted_at", "newest first"],
  ["submitted_at", "oldest first"],
  ["-priority", "priority"],
  ["name", "name"],
  ["status", "status"],
  ["-started_at", "recently started"],
];
const FILTERS = ["vc", "status", "owner", "type", "array", "ordering", "page", "page_size"];

/** The page's rows in order, an array's tasks gathered under their array where it first
 * appears (the tasks of one submission, not scattered among other jobs). */
export function groupByArray(rows: Job[]): (Job | { array: string; tasks: Job[] })[] {
  const groups = new Map<string, Job[]>();
  const out: (Job | { array: string; tasks: Job[] })[] = [];
  for (const job of rows) {
    if (!job.array) {
      out.push(job);
      continue;
    }
    let tasks = groups.get(job.array);
    if (!tasks) {
      tasks = [];
      groups.set(job.array, tasks);
      out.push({ array: job.array, tasks });
    }
    tasks.push(job);
  }
  return out;
}

function statusCounts(tasks: Job[]): string {
  const counts = new Map<string, number>();
  for (const task of tasks) counts.set(task.status, (counts.get(task.status) ?? 0) + 1);
  return [...counts].map(([status, count]) => `${count} ${status}`).join(", ");
}

/** The API query string for the jobs list, from the page's own URL (so a view can be shared). */
export function jobsQuery(params: URLSearchParams): string {
  const query = new URLSearchParams();
  for (const key of FILTERS) {
    const value = params.get(key);
    if (value) query.set(key, value);
  }
  if (!query.has("page_size")) query.set("page_size", "50");
  return query.toString();
}

export function JobsPage() {
  const me = useMe();
  const [params, setParams] = useSearchParams();
  const jobs = useJobs(jobsQuery(params), 10000);
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [results, setResults] = useState<{ action: string; results: BatchResult[] } | null>(null);
  const [actionError, setActionError] = useState<unknown>(null);
  const [now, setNow] = useState(Date.now());
  const [expanded, setExpanded] = useState<Set<string>>(new Set());
  const arrayId = params.get("array");
  useEffect(() => {
    const timer = window.setInterval(() => setNow(Date.now()), 1000);
    return () => window.clearInterval(timer);
  }, []);

  function filter(key: string, value: string) {
    const next = new URLSearchParams(params);
    if (value) next.set(key, value);
    else next.delete(key);
    if (key !== "page") next.delete("page");
    setParams(next);
  }

  async function actOnArray(action: "kill" | "pause" | "resume") {
    setActionError(null);
    try {
      const answer = await actOnJobArray(arrayId ?? "", action);
      setResults({ action: `${action} array ${arrayId}`, results: [{ id: arrayId ?? "", ok: true, status: `${answer.changed} jobs changed` }] });
      jobs.reload();
    } catch (reason) {
      setActionError(reason);
    }
  }

  async function act(action: JobAction) {
    setActionError(null);
    try {
      const answer = await actOnJobs({ action, ids: [...selected] });
      setResults(answer);
      setSelected(new Set());
      jobs.reload();
    } catch (reason) {
      setActionError(reason);
    }
  }

  const rows = jobs.data?.results ?? [];
  const page = Number(params.get("page") ?? 1);
  const pageSize = Number(params.get("page_size") ?? 50);
  const pages = jobs.data ? Math.max(1, Math.ceil(jobs.data.count / pageSize)) : 1;
  const allSelected = rows.length > 0 && rows.every((job) => selected.has(job.id));

  function jobRow(job: Job) {
    const left = timeLeft(job, now);
    return (
      <tr key={job.id}>
        <td>
          <input
            type="checkbox"
            aria-label={`Select job ${job.id}`}
            checked={selected.has(job.id)}
            onChange={() => {
              const next = new Set(selected);
              if (next.has(job.id)) next.delete(job.id);
              else next.add(job.id);
              setSelected(next);
            }}
          />
        </td>
        <td>
          <Link to={`/jobs/${job.id}`}>{job.id}</Link>
        </td>
        <td className="name">{job.name}</td>
        <td>{job.owner}</td>
        <td>{job.vc}</td>
        <td>{job.type}</td>
        <td title={job.status_message}>
          <StatusBadge status={job.status} />
        </td>
        <td>
          {job.workers} x {job.gpus_per_worker} {job.gpu_type}
        </td>
        <td>{when(job.submitted_at)}</td>
        <td className={left !== null && left < 600 ? "urgent" : ""}>{left === null ? "—" : duration(left)}</td>
      </tr>
    );
  }

  return (
    <section>
      <div className="heading">
        <h1>Jobs</h1>
        <Link to="/submit" className="button primary">
          Submit job
        </Link>
      </div>
      <form className="filters" aria-label="Filter jobs" onSubmit={(e) => e.preventDefault()}>
        <label>
          VC
          <select value={params.get("vc") ?? ""} onChange={(e) => filter("vc", e.target.value)}>
            <option value="">all</option>
            {me.vcs.map((vc) => (
              <option key={vc.name}>{vc.name}</option>
            ))}
          </select>
        </label>
        <label>
          Status
          <select value={params.get("status") ?? ""} onChange={(e) => filter("status", e.target.value)}>
            <option value="">all</option>
            {JOB_STATUSES.map((status) => (
              <option key={status}>{status}</option>
            ))}
          </select>
        </label>
        <label>
          Owner
          <input
            defaultValue={params.get("owner") ?? ""}
            placeholder="username"
            onKeyDown={(e) => e.key === "Enter" && filter("owner", e.currentTarget.value.trim())}
            onBlur={(e) => filter("owner", e.currentTarget.value.trim())}
          />
        </label>
        <label>
          Type
          <select value={params.get("type") ?? ""} onChange={(e) => filter("type", e.target.value)}>
            <option value="">all</option>
            {TYPES.map((type) => (
              <option key={type}>{type}</option>
            ))}
          </select>
        </label>
        <label>
          Sort
          <select value={params.get("ordering") ?? "-submitted_at"} onChange={(e) => filter("ordering", e.target.value)}>
            {SORTS.map(([value, label]) => (
              <option key={value} value={value}>
                {label}
              </option>
            ))}
          </select>
        </label>
      </form>
      {arrayId && (
        <div className="toolbar" role="toolbar" aria-label="Act on the array">
          <span>
            Job array <strong>{arrayId}</strong>: its tasks only. <Link to="/jobs">All jobs</Link>
          </span>
          {(["kill", "pause", "resume"] as const).map((action) => (
            <button type="button" key={action} onClick={() => actOnArray(action)}>
              {action[0].toUpperCase() + action.slice(1)} array
            </button>
          ))}
        </div>
      )}
      <div className="toolbar" role="toolbar" aria-label="Act on selected jobs">
        <span>{selected.size} selected</span>
        {(["kill", "pause", "resume", "approve"] as const).map((action) => (
          <button type="button" key={action} disabled={!selected.size} onClick={() => act(action)}>
            {action[0].toUpperCase() + action.slice(1)}
          </button>
        ))}
      </div>
      <ErrorBox error={actionError} />
      {results && (
        <div className="results" role="status" aria-label="Results">
          <strong>{results.action}:</strong>
          <ul>
            {results.results.map((result) => (
              <li key={result.id} className={result.ok ? "ok" : "failed"}>
                {result.id}: {result.ok ? `ok, now ${result.status}` : result.error}
              </li>
            ))}
          </ul>
          <button type="button" className="link" onClick={() => setResults(null)}>
            Dismiss
          </button>
        </div>
      )}
      <DataTable
        className="jobs"
        label="Jobs"
        what="jobs"
        rows={arrayId ? rows : groupByArray(rows)}
        loading={jobs.loading && !jobs.data}
        error={jobs.error}
        retry={jobs.reload}
        empty={
          <>
            No jobs match. <Link to="/submit">Submit one</Link>
            {params.toString() && (
              <>
                {" "}
                or <Link to="/jobs">clear the filters</Link>
              </>
            )}
            .
          </>
        }
        columns={
          <>
            <th>
              <input
                type="checkbox"
                aria-label="Select all jobs on this page"
                checked={allSelected}
                onChange={() => setSelected(allSelected ? new Set() : new Set(rows.map((job) => job.id)))}
              />
            </th>
            <th>Job</th>
            <th>Name</th>
            <th>Owner</th>
            <th>VC</th>
            <th>Type</th>
            <th>Status</th>
            <th>Resources</th>
            <th>Submitted</th>
            <th>Time left</th>
          </>
        }
        row={(entry) => {
          if (!("tasks" in entry)) return jobRow(entry);
          const open = expanded.has(entry.array);
          const first = entry.tasks[0];
          return [
            <tr key={`array-${entry.array}`} className="array-group">
              <td>
                <button
                  type="button"
                  className="link"
                  aria-expanded={open}
                  aria-label={`${open ? "Hide" : "Show"} the tasks of array ${entry.array}`}
                  onClick={() => {
                    const next = new Set(expanded);
                    if (open) next.delete(entry.array);
                    else next.add(entry.array);
                    setExpanded(next);
                  }}
                >
                  {open ? "▾" : "▸"}
                </button>
              </td>
              <td>
                <Link to={`/jobs?array=${entry.array}`}>array {entry.array}</Link>
              </td>
              <td className="name">{first.name}</td>
              <td>{first.owner}</td>
              <td>{first.vc}</td>
              <td>{first.type}</td>
              <td>{statusCounts(entry.tasks)}</td>
              <td>
                {entry.tasks.length} tasks here x {first.workers} x {first.gpus_per_worker} {first.gpu_type}
              </td>
              <td>{when(first.submitted_at)}</td>
              <td>—</td>
            </tr>,
            ...(open ? entry.tasks.map(jobRow) : []),
          ];
        }}
      />
      {jobs.data && jobs.data.count > 0 && (
        <nav className="pager" aria-label="Pages">
          <button type="button" disabled={page <= 1} onClick={() => filter("page", String(page - 1))}>
            Previous
          </button>
          <span>
            Page {page} of {pages} · {jobs.data.count} jobs
          </span>
          <button type="button" disabled={page >= pages} onClick={() => filter("page", String(page + 1))}>
            Next
          </button>
          <select aria-label="Jobs per page" value={pageSize} onChange={(e) => filter("page_size", e.target.value)}>
            {[25, 50, 100, 200].map((size) => (
              <option key={size} value={size}>
                {size} per page
              </option>
            ))}
          </select>
        </nav>
      )}
    </section>
  );
}
