import { useEffect, useState, type FormEvent } from "react";
import { Link, useParams } from "react-router";
import { ApiError, type Job, type Schemas } from "../api";
import { isVcAdmin, useMe } from "../auth";
import { JobChangeForm } from "../components/JobChangeForm";
import { ErrorBox, Loading, StatusBadge } from "../components/common";
import { GpuUtilisationChart } from "../components/GpuUtilisationChart";
import { actOnJob, exposePort, type JobAction, useJob, useJobAttempts, useJobEvents, useJobGpuHours, useJobMetrics } from "../endpoints";
import { hours } from "./Usage";
import { admissionAnswer, elasticSize } from "./jobElastic";
import { LogViewer } from "../components/LogViewer";
import { duration, memory, timeLeft, when } from "../format";
import { isIn, PAUSABLE_STATUSES, PENDING_OR_ACTIVE_STATUSES, TERMINAL_STATUSES } from "../jobStatuses";

export function JobDetailPage() {
  const { id = "" } = useParams();
  const job = useJob(id, 3000);
  const active = job.data ? isIn(job.data.status, PENDING_OR_ACTIVE_STATUSES) : true;
  const events = useJobEvents(id, active ? 3000 : 0);
  const attempts = useJobAttempts(id, active ? 5000 : 0);
  // GPU utilisation, once the job has run, while metrics exist (the chart is left out otherwise).
  const ran = Boolean(job.data?.started_at || job.data?.attempt);
  const metrics = useJobMetrics(ran ? id : null, active ? 30000 : 0);
  const since = job.data?.submitted_at;
  const gpuHours = useJobGpuHours(
    ran && since ? `group_by=job&job=${id}&since=${encodeURIComponent(since)}` : null,
    active ? 60000 : 0,
  );
  const [actionError, setActionError] = useState<unknown>(null);
  // A change of status brings new events and attempts (polling stops once the job ended).
  const status = job.data?.status;
  const reloadEvents = events.reload;
  const reloadAttempts = attempts.reload;
  useEffect(() => {
    if (status) {
      reloadEvents();
      reloadAttempts();
    }
  }, [status, reloadEvents, reloadAttempts]);

  const me = useMe();
  const [exposing, setExposing] = useState({ name: "", port: "" });
  const [exposeError, setExposeError] = useState<unknown>(null);

  async function expose(event: FormEvent) {
    event.preventDefault();
    setExposeError(null);
    try {
      await exposePort(id, { name: exposing.name, port: Number(exposing.port) });
      setExposing({ name: "", port: "" });
      job.reload();
    } catch (reason) {
      setExposeError(reason);
    }
  }

  async function act(action: JobAction) {
    setActionError(null);
    try {
      await actOnJob(id, action);
      job.reload();
      events.reload();
    } catch (reason) {
      setActionError(reason);
    }
  }

  if (job.loading && !job.data) return <Loading what={`job ${id}`} />;
  if (!job.data && job.error instanceof ApiError && job.error.status === 404) return <NoSuchJob id={id} />;
  if (!job.data) return <ErrorBox error={job.error} retry={job.reload} />;
  const j = job.data;
  const left = timeLeft(j);
  const attemptRows = attempts.data ?? [];
  const endpoints = j.endpoints ?? {};

  return (
    <section>
      <div className="heading">
        <h1>
          {j.name} <small>{j.id}</small> <StatusBadge status={j.status} />
        </h1>
        <div className="actions">
          <Link className="button" to={`/submit?clone=${j.id}`}>
            Clone
          </Link>
          {isIn(j.status, PAUSABLE_STATUSES) && (
            <button type="button" onClick={() => act("pause")}>
              Pause
            </button>
          )}
          {j.status === "paused" && (
            <button type="button" onClick={() => act("resume")}>
              Resume
            </button>
          )}
          {!isIn(j.status, TERMINAL_STATUSES) ? (
            <button type="button" className="danger" onClick={() => act("kill")}>
              Kill
            </button>
          ) : null}
        </div>
      </div>
      <ErrorBox error={actionError} />
      <div className="messages">
        {j.status_message && (
          <p className="message status-message" aria-label="Status message">
            <strong>Status:</strong> {j.status_message}
          </p>
        )}
        {j.insight_message && (
          <p className="message insight" aria-label="Insight">
            <strong>Insight:</strong> {j.insight_message}
          </p>
        )}
        {j.repair_message && (
          <p className="message repair" aria-label="Repair message">
            <strong>Repair:</strong> {j.repair_message}
          </p>
        )}
        {(j.warnings ?? []).map((warning) => (
          <p key={warning} className="message warning" aria-label="Warning">
            <strong>Warning:</strong> {warning}
          </p>
        ))}
      </div>
      <div className="detail-grid">
        <dl className="spec" aria-label="Spec">
          <dt>Owner</dt>
          <dd>{j.owner}</dd>
          <dt>VC</dt>
          <dd>
            <Link to={`/vcs/${j.vc}`}>{j.vc}</Link>
          </dd>
          <dt>Type</dt>
          <dd>{j.type}{j.preemptible ? ", preemptible" : ""}</dd>
          <dt>Resources</dt>
          <dd>
            {j.workers} worker(s) x {j.gpus_per_worker} {j.gpu_type} GPU, {j.cpus_per_worker} CPU, {memory(j.memory_per_worker)}
          </dd>
          {elasticSize(j) && (
            <>
              <dt>Elastic</dt>
              <dd aria-label="Elastic">{elasticSize(j)}</dd>
            </>
          )}
          <dt>Image</dt>
          <dd>{j.image || "(the host's environment)"}</dd>
          <dt>Command</dt>
          <dd>
            <code>{j.command}</code>
          </dd>
          {j.env && Object.keys(j.env).length > 0 && (
            <>
              <dt>Environment</dt>
              <dd>
                {Object.entries(j.env).map(([key, value]) => (
                  <code key={key} className="env">
                    {key}={value}
                  </code>
                ))}
              </dd>
            </>
          )}
          {j.data_path && (
            <>
              <dt>Data</dt>
              <dd>{j.data_path}</dd>
            </>
          )}
          {j.output_path && (
            <>
              <dt>Output</dt>
              <dd>{j.output_path}</dd>
            </>
          )}
          {j.run_as && (
            <>
              <dt>Runs as</dt>
              <dd>{j.run_as}</dd>
            </>
          )}
          {j.limits && (
            <>
              <dt>Limits</dt>
              <dd>{j.limits}</dd>
            </>
          )}
          <dt>Priority</dt>
          <dd>{j.priority}</dd>
          <dt>Retries</dt>
          <dd>
            {j.retries_used} of {j.max_retries} used, on {j.retry_on === "any" ? "any failure" : "infrastructure failures"}
          </dd>
          <dt>Wall time</dt>
          <dd>
            {duration(j.max_wall_time)}
            {left !== null && `, ${duration(left)} left`}
          </dd>
          <dt>Submitted</dt>
          <dd>{when(j.submitted_at)}</dd>
          <dt>Started</dt>
          <dd>{when(j.started_at)}</dd>
          <dt>Finished</dt>
          <dd>{when(j.finished_at)}</dd>
          {j.estimated_start_at && (
            <>
              <dt>Estimated start</dt>
              <dd>{when(j.estimated_start_at)}</dd>
            </>
          )}
          {j.deadline && (
            <>
              <dt>Deadline</dt>
              <dd aria-label="Deadline">
                {when(j.deadline)} ({deadlineVerdict(j)})
              </dd>
            </>
          )}
          {admissionAnswer(j) && (
            <>
              <dt>Admission</dt>
              <dd aria-label="Admission">{admissionAnswer(j)}</dd>
            </>
          )}
          {j.exit_code !== null && (
            <>
              <dt>Exit code</dt>
              <dd>
                {j.exit_code}
                {j.failure_class && ` (${j.failure_class}${j.failure_rule ? `: ${j.failure_rule}` : ""})`}
              </dd>
            </>
          )}
        </dl>
        <div>
          {(endpoints.ssh || endpoints.vscode) && (
            <div className="endpoints" aria-label="Endpoints">
              <h2>Endpoints</h2>
              {endpoints.ssh && (
                <p>
                  SSH: <code>{endpoints.ssh}</code>
                </p>
              )}
              {endpoints.vscode && (
                <p>
                  <a href={endpoints.vscode}>Open in VS Code</a>
                </p>
              )}
              {(endpoints.ports ?? []).map((exposed) => (
                <p key={exposed.name}>
                  <a href={exposed.url} target="_blank" rel="noreferrer">
                    Open {exposed.name}
                  </a>{" "}
                  (port {exposed.port})
                </p>
              ))}
              {j.owner === me.username && (
                <form className="row" onSubmit={expose} aria-label="Expose a port">
                  <input aria-label="Port name" placeholder="name, e.g. tensorboard" value={exposing.name}
                    onChange={(e) => setExposing((x) => ({ ...x, name: e.target.value }))} />
                  <input aria-label="Port" type="number" placeholder="port" value={exposing.port}
                    onChange={(e) => setExposing((x) => ({ ...x, port: e.target.value }))} />
                  <button type="submit">Expose</button>
                  <ErrorBox error={exposeError} />
                </form>
              )}
              {endpoints.ssh_config && (
                <details>
                  <summary>~/.ssh/config</summary>
                  <pre aria-label="SSH config">{endpoints.ssh_config}</pre>
                </details>
              )}
              {endpoints.host_key_fingerprint && (
                <p className="hint">
                  Gateway host key: <code>{endpoints.host_key_fingerprint}</code> (check it when SSH asks on first use)
                </p>
              )}
            </div>
          )}
          {isVcAdmin(me, j.vc) && isIn(j.status, PENDING_OR_ACTIVE_STATUSES) && (
            <>
              <h2>Change (VC admins)</h2>
              <JobChangeForm key={j.id} job={j} onChanged={() => { job.reload(); events.reload(); }} />
            </>
          )}
          <h2>Status history</h2>
          <ErrorBox error={events.error} />
          <ol className="events" aria-label="Status history">
            {(events.data ?? []).map((event, index) => (
              <li key={index}>
                <time>{when(event.created_at)}</time> {event.from_status || "new"} → <StatusBadge status={event.to_status} /> by {event.actor}
                {event.reason && <span className="reason"> — {event.reason}</span>}
              </li>
            ))}
          </ol>
          <h2>Attempts</h2>
          {attemptRows.length === 0 ? (
            <p className="empty">Not run yet.</p>
          ) : (
            <table aria-label="Attempts">
              <thead>
                <tr>
                  <th>#</th>
                  <th>Nodes</th>
                  <th>Started</th>
                  <th>Ended</th>
                  <th>Exit</th>
                  <th>Failure class</th>
                  <th>Message</th>
                </tr>
              </thead>
              <tbody>
                {attemptRows.map((attempt) => (
                  <tr key={attempt.number}>
                    <td>{attempt.number}</td>
                    <td>{attempt.nodes.join(", ")}</td>
                    <td>{when(attempt.started_at)}</td>
                    <td>{when(attempt.ended_at)}</td>
                    <td>{attempt.exit_code ?? "—"}</td>
                    <td>{attempt.failure_class ? `${attempt.failure_class}${attempt.failure_rule ? ` (${attempt.failure_rule})` : ""}` : "—"}</td>
                    <td>{attempt.message}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </div>
      </div>
      {gpuHours.data?.results[0] && <GpuHoursLine row={gpuHours.data.results[0]} />}
      {metrics.data?.available && (
        <>
          <h2>GPU utilisation</h2>
          <GpuUtilisationChart metrics={metrics.data} />
        </>
      )}
      <h2>Log</h2>
      {j.started_at || j.attempt ? <LogViewer jobId={j.id} workers={j.workers} /> : <p className="empty">No log yet: the job has not started.</p>}
    </section>
  );
}

/** Booked, used and idle GPU-hours of the job's attempts so far. */
function GpuHoursLine({ row }: { row: Schemas["GpuHoursRow"] }) {
  return (
    <p aria-label="GPU-hours">
      GPU-hours: <strong>{hours(row.booked_gpu_hours)}</strong> booked, {hours(row.used_gpu_hours)} used,{" "}
      <strong>{hours(row.idle_gpu_hours)}</strong> idle
      {row.borrowed_gpu_hours > 0 && <>, {hours(row.borrowed_gpu_hours)} on borrowed GPUs</>}
      {row.used_gpu_hours === null && <span className="muted"> (used and idle unknown: {row.used_unavailable_reason})</span>}
    </p>
  );
}

/** Whether the job made its deadline, or, until it ends, whether it is predicted to. */
function deadlineVerdict(job: Job): string {
  if (!job.deadline) return "";
  if (job.finished_at) {
    const met = job.status === "finished" && Date.parse(job.finished_at) <= Date.parse(job.deadline);
    return met ? "met" : "missed";
  }
  if (job.deadline_forecast === true) return "predicted to make it";
  if (job.deadline_forecast === false) return "predicted to miss it";
  return "no forecast yet";
}

/** A job id that names no job the user may see: said plainly, with where to look. */
function NoSuchJob({ id }: { id: string }) {
  return (
    <section>
      <h1>No job {id}</h1>
      <p className="empty" role="alert">
        There is no job {id} that you may see: it may belong to a VC you are not in, or have been
        deleted. See <Link to="/jobs">your jobs</Link>, or, if {id} is a job array, <Link to={`/jobs?array=${encodeURIComponent(id)}`}>its tasks</Link>.
      </p>
    </section>
  );
}
