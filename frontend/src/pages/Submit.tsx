import { useEffect, useMemo, useRef, useState, type FormEvent } from "react";
import { useNavigate, useSearchParams } from "react-router";
import { ApiError, type FieldErrors, type Schemas, type Vc } from "../api";
import { useMe } from "../auth";
import { ErrorBox, Field, Loading } from "../components/common";
import { getVc, previewJob, submitJob, useClusterSummary, useGpuTypes, useJob, useVc } from "../endpoints";
import { FragmentationChart } from "../components/FragmentationChart";
import { duration, memory, when } from "../format";
import {
  defaultChoice,
  emptyForm,
  formFromJob,
  localStartCheck,
  neverStartReason,
  JOB_PRESETS,
  parseEnv,
  parsePorts,
  parseThroughput,
  presets,
  submission,
  type SubmitForm,
} from "./submitModel";

export function SubmitPage() {
  const me = useMe();
  const [params] = useSearchParams();
  const cloneId = params.get("clone");
  const askedVc = params.get("vc");
  const [form, setForm] = useState<SubmitForm>(() => emptyForm(askedVc ?? me.vcs[0]?.name ?? ""));
  const [errors, setErrors] = useState<FieldErrors>({});
  const [failure, setFailure] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const navigate = useNavigate();

  const clone = useJob(cloneId);
  useEffect(() => {
    if (clone.data) setForm(formFromJob(clone.data));
  }, [clone.data]);

  const loadedVc = useVc(form.vc || null);
  // Only the chosen VC's answer: while another VC's is still shown, its GPU types are not
  // this one's.
  const vc = { ...loadedVc, data: loadedVc.data?.name === form.vc ? loadedVc.data : undefined };
  const gpuTypes = useGpuTypes();
  const cluster = useClusterSummary(15000);
  const allTypes = useMemo(
    () => gpuTypes.data ?? [],
    [gpuTypes.data],
  );
  const typeList = useMemo(() => {
    const withQuota = new Set((vc.data?.resources ?? []).map((row) => row.gpu_type));
    return withQuota.size ? allTypes.filter((type) => withQuota.has(type.name)) : allTypes;
  }, [allTypes, vc.data]);

  // A new form (no clone, no ?vc=) opens where a job can start now: the user's VCs are
  // read once, and the choice applies unless the user picked a VC meanwhile.
  const picked = useRef(false);
  const choosing = !cloneId && !askedVc && me.vcs.length > 0;
  const [myVcs, setMyVcs] = useState<Vc[] | null>(null);
  const vcNames = me.vcs.map((m) => m.name).join(",");
  useEffect(() => {
    if (!choosing) return;
    const controller = new AbortController();
    Promise.all(vcNames.split(",").map((name) => getVc(name, controller.signal)))
      .then(setMyVcs)
      .catch(() => setMyVcs([]));
    return () => controller.abort();
  }, [choosing, vcNames]);
  const choice = useMemo(
    () => (myVcs && allTypes.length && cluster.data ? defaultChoice(myVcs, allTypes, cluster.data.gpu_types) : null),
    [myVcs, allTypes, cluster.data],
  );
  useEffect(() => {
    if (choice && !picked.current) {
      picked.current = true;
      setForm((f) => ({ ...f, vc: choice.vc, gpu_type: choice.gpu_type }));
    }
  }, [choice]);

  // The GPU type the form shows is the one it sends: the one chosen if the VC offers it,
  // else the VC's first (derived on each render, so that a submit never races an update).
  // Until the cluster's GPU types are in, the VC's quotas name the types it offers.
  const offered = typeList.length
    ? typeList.map((type) => type.name)
    : (vc.data?.resources ?? []).map((row) => row.gpu_type);
  const gpuTypeName =
    offered.length === 0 || offered.includes(form.gpu_type) ? form.gpu_type : offered[0];
  const gpuType = typeList.find((type) => type.name === gpuTypeName);
  const cpuOnly = gpuTypeName === "cpu"; // a CPU-only type: no GPUs to ask for
  const gpusPerWorker = cpuOnly ? "0" : form.gpus_per_worker;
  const clusterRow = cluster.data?.gpu_types.find((row) => row.gpu_type === gpuTypeName);
  const quotaRow = vc.data?.resources?.find((row) => row.gpu_type === gpuTypeName);
  const maxMinutes = vc.data ? Math.floor(vc.data.max_wall_time / 60) : undefined;

  // Ask the server whether the job could start now, for the form as it is; without that
  // endpoint (or while the form is incomplete), judge from the cluster's free GPUs.
  const body = useMemo(
    () => submission({ ...form, gpu_type: gpuTypeName, gpus_per_worker: gpusPerWorker }),
    [form, gpuTypeName, gpusPerWorker],
  );
  const bodyKey = JSON.stringify(body);
  const [preview, setPreview] = useState<{ key: string; answer: Schemas["StartPreview"] | null; never?: string | null }>({ key: "", answer: null });
  const [previewMissing, setPreviewMissing] = useState(false);
  useEffect(() => {
    if (!form.vc || !form.command.trim() || previewMissing) return;
    const controller = new AbortController();
    const timer = window.setTimeout(() => {
      previewJob(JSON.parse(bodyKey), controller.signal)
        .then((answer) => setPreview({ key: bodyKey, answer }))
        .catch((reason) => {
          if ((reason as Error).name === "AbortError") return;
          if (reason instanceof ApiError && (reason.status === 404 || reason.status === 405)) setPreviewMissing(true);
          const never = reason instanceof ApiError && reason.status === 400 ? neverStartReason(reason.fields) : null;
          setPreview({ key: bodyKey, answer: null, never });
        });
    }, 300);
    return () => {
      window.clearTimeout(timer);
      controller.abort();
    };
  }, [bodyKey, form.vc, form.command, previewMissing]);
  const asked = !previewMissing && !!form.command.trim();
  const answered = preview.key === bodyKey;
  const serverAnswer = answered ? preview.answer : null;
  const never = answered ? (preview.never ?? null) : null;
  const localReason = localStartCheck(
    Number(form.workers) || 1,
    Number(gpusPerWorker) || 0,
    clusterRow,
    quotaRow?.free.gpus,
    form.preemptible,
  );
  const checking = asked && !answered;
  const reason = serverAnswer
    ? serverAnswer.can_start_now
      ? null
      : (serverAnswer.reason ?? "it must wait for resources")
    : checking
      ? null
      : localReason;
  const startNote = serverAnswer?.can_start_now ? serverAnswer.reason : null;

  function set<K extends keyof SubmitForm>(key: K, value: SubmitForm[K]) {
    setForm((f) => ({ ...f, [key]: value }));
  }

  async function submit(event: FormEvent) {
    event.preventDefault();
    const { bad } = parseEnv(form.env);
    if (bad.length) {
      setErrors({ env: [`Write one KEY=value per line; not: ${bad.join(", ")}`] });
      return;
    }
    const badCurve = parseThroughput(form.throughput).bad;
    if (badCurve.length) {
      setErrors({ throughput: [`Write samples/s at 1, 2, ... workers, e.g. 100, 190, 270; not: ${badCurve.join(", ")}`] });
      return;
    }
    const badPorts = parsePorts(form.ports).bad;
    if (badPorts.length) {
      setErrors({ ports: [`Write NAME=PORT, e.g. jupyter=8888; not: ${badPorts.join(", ")}`] });
      return;
    }
    setBusy(true);
    setFailure(null);
    try {
      const answer = await submitJob(body);
      navigate("jobs" in answer ? `/jobs?array=${answer.array}` : `/jobs/${answer.id}`);
    } catch (reason) {
      const fields = reason instanceof ApiError ? { ...reason.fields } : {};
      if (fields.max_wall_time) {
        // Said in the field's own unit: minutes.
        const asked = Number(form.wall_minutes);
        fields.wall_minutes =
          vc.data && maxMinutes !== undefined && asked > maxMinutes
            ? [`At most ${maxMinutes} min (${duration(vc.data.max_wall_time)}) in VC ${vc.data.name}; you asked for ${asked} min.`]
            : fields.max_wall_time;
      }
      if (fields.array) fields.tasks = fields.array;
      setErrors(fields);
      setFailure(reason);
    } finally {
      setBusy(false);
    }
  }

  if (!me.vcs.length) {
    return (
      <section>
        <h1>Submit a job</h1>
        <p className="empty">You are in no virtual cluster yet. Ask a cluster admin to add you to one.</p>
      </section>
    );
  }
  return (
    <section>
      <h1>Submit a job{clone.data ? ` (clone of ${clone.data.id})` : ""}</h1>
      {clone.loading && <Loading what="the job to clone" />}
      <ErrorBox error={clone.error} />
      <div className="submit-grid">
        <form onSubmit={submit} aria-label="Submit a job" noValidate>
          {failure !== null && <ErrorBox error={failure} />}
          <div className="row">
            <Field label="Virtual cluster" name="vc" errors={errors}>
              <select id="f-vc" value={form.vc} onChange={(e) => {
                  const vcName = e.target.value;
                  picked.current = true;
                  setForm((f) => ({ ...f, vc: vcName, gpu_type: "" }));
                }}>
                {me.vcs.map((m) => (
                  <option key={m.name}>{m.name}</option>
                ))}
              </select>
            </Field>
            <Field label="Job type" name="type" errors={errors}>
              <select id="f-type" value={form.type} onChange={(e) => set("type", e.target.value)}>
                <option value="batch">batch</option>
                <option value="interactive">interactive</option>
                <option value="distributed">distributed</option>
              </select>
            </Field>
            <Field label="Name" name="name" errors={errors}>
              <input id="f-name" value={form.name} onChange={(e) => set("name", e.target.value)} placeholder="from the command" />
            </Field>
          </div>
          <div className="row">
            <Field label="GPU type" name="gpu_type" errors={errors}>
              <select id="f-gpu_type" value={gpuTypeName} onChange={(e) => {
                  picked.current = true;
                  set("gpu_type", e.target.value);
                }}>
                {offered.map((name) => (
                  <option key={name}>{name}</option>
                ))}
              </select>
            </Field>
            <Field label="Workers" name="workers" errors={errors}>
              <input id="f-workers" type="number" min={1} value={form.workers} onChange={(e) => set("workers", e.target.value)} />
            </Field>
            {!cpuOnly && (
              <Field label="GPUs per worker" name="gpus_per_worker" errors={errors}>
                <input id="f-gpus_per_worker" type="number" min={0} value={form.gpus_per_worker} onChange={(e) => set("gpus_per_worker", e.target.value)} />
              </Field>
            )}
          </div>
          {gpuType && (
            <div className="presets" role="group" aria-label="T-shirt sizes">
              <span>Sizes for {gpuType.name}:</span>
              {presets(gpuType).map((size) => (
                <button
                  type="button"
                  key={size.cpus}
                  onClick={() =>
                    setForm((f) => ({
                      ...f,
                      gpus_per_worker: String(size.gpus),
                      cpus_per_worker: String(size.cpus),
                      memory_per_worker: String(size.memory),
                    }))
                  }
                >
                  {size.gpus ? `${size.gpus} GPU` : "CPU"} · {size.cpus} CPU · {memory(size.memory)}
                </button>
              ))}
            </div>
          )}
          <div className="row">
            <Field label="CPUs per worker" name="cpus_per_worker" errors={errors} hint="empty: the t-shirt size">
              <input id="f-cpus_per_worker" inputMode="decimal" value={form.cpus_per_worker} onChange={(e) => set("cpus_per_worker", e.target.value)} />
            </Field>
            <Field label="Memory per worker" name="memory_per_worker" errors={errors} hint="MiB, or e.g. 64Gi">
              <input id="f-memory_per_worker" value={form.memory_per_worker} onChange={(e) => set("memory_per_worker", e.target.value)} />
            </Field>
          </div>
          <fieldset className="elastic" aria-label="Elastic size and deadline">
            <p className="hint">
              Elastic (optional): the job starts as soon as its fewest workers fit and grows into idle GPUs up to its most. Its VC&apos;s quota
              guarantees the fewest; the workers above are borrowed and may be taken back. Each resize restarts it from its last checkpoint.
              With a deadline, its throughput and its work, the answer says whether it can meet the deadline.
            </p>
            <div className="row">
              <Field label="Fewest workers" name="min_workers" errors={errors} hint="empty: fixed at Workers">
                <input id="f-min_workers" type="number" min={1} value={form.min_workers} onChange={(e) => set("min_workers", e.target.value)} />
              </Field>
              <Field label="Most workers" name="max_workers" errors={errors} hint="it asks for this many when they are free">
                <input id="f-max_workers" type="number" min={1} value={form.max_workers} onChange={(e) => set("max_workers", e.target.value)} />
              </Field>
              <Field label="Throughput" name="throughput" errors={errors} hint="samples/s at 1, 2, ... workers; empty: learned from earlier runs">
                <input id="f-throughput" value={form.throughput} onChange={(e) => set("throughput", e.target.value)} placeholder="e.g. 100, 190, 270" />
              </Field>
              <Field label="Work (samples)" name="work" errors={errors} hint="what the job must process by its deadline">
                <input id="f-work" inputMode="decimal" value={form.work} onChange={(e) => set("work", e.target.value)} />
              </Field>
            </div>
          </fieldset>
          <Field label="Image" name="image" errors={errors}>
            <input id="f-image" value={form.image} onChange={(e) => set("image", e.target.value)} placeholder="e.g. pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime" />
          </Field>
          <div className="presets" role="group" aria-label="Interactive jobs">
            <span>Start from:</span>
            {JOB_PRESETS.map((preset) => (
              <button
                type="button"
                key={preset.name}
                onClick={() =>
                  setForm((f) => ({ ...f, type: "interactive", name: preset.name, command: preset.command, ports: preset.ports }))
                }
              >
                {preset.label}
              </button>
            ))}
            <span className="hint">an interactive job keeps its GPUs until its wall time or a kill</span>
          </div>
          <Field label="Command" name="command" errors={errors}>
            <textarea id="f-command" rows={3} value={form.command} onChange={(e) => set("command", e.target.value)} required />
          </Field>
          <Field label="Environment" name="env" errors={errors} hint="one KEY=value per line">
            <textarea id="f-env" rows={2} value={form.env} onChange={(e) => set("env", e.target.value)} />
          </Field>
          <Field label="Ports" name="ports" errors={errors} hint="NAME=PORT, opened in the browser under /endpoints/">
            <input id="f-ports" value={form.ports} onChange={(e) => set("ports", e.target.value)} placeholder="e.g. jupyter=8888" />
          </Field>
          <div className="row">
            <Field label="Data path" name="data_path" errors={errors}>
              <input id="f-data_path" value={form.data_path} onChange={(e) => set("data_path", e.target.value)} />
            </Field>
            <Field label="Output path" name="output_path" errors={errors}>
              <input id="f-output_path" value={form.output_path} onChange={(e) => set("output_path", e.target.value)} />
            </Field>
          </div>
          <div className="row">
            <Field label="Max retry count" name="max_retries" errors={errors} hint={vc.data ? `empty: the VC's default, ${vc.data.default_max_retries}` : undefined}>
              <input id="f-max_retries" type="number" min={0} max={20} value={form.max_retries} onChange={(e) => set("max_retries", e.target.value)} />
            </Field>
            <Field label="Retry on" name="retry_on" errors={errors} hint="a user error (a command exiting 3) is retried only on any failure">
              <select id="f-retry_on" value={form.retry_on} onChange={(e) => set("retry_on", e.target.value)}>
                <option value="infrastructure">infrastructure failures</option>
                <option value="any">any failure</option>
              </select>
            </Field>
            <Field
              label="Wall time (minutes)"
              name="wall_minutes"
              errors={errors}
              hint={vc.data ? wallTimeHint(vc.data, form.type, maxMinutes) : undefined}
            >
              <input id="f-wall_minutes" type="number" min={1} max={maxMinutes} value={form.wall_minutes} onChange={(e) => set("wall_minutes", e.target.value)} />
            </Field>
            <Field label="Deadline" name="deadline" errors={errors} hint="optional: the job's page says whether it is predicted to make it">
              <input id="f-deadline" type="datetime-local" value={form.deadline} onChange={(e) => set("deadline", e.target.value)} />
            </Field>
            <Field label="Tasks" name="tasks" errors={errors} hint="more than 1: a job array, each task with its TRAINYARD_ARRAY_INDEX">
              <input id="f-tasks" type="number" min={1} max={10000} value={form.tasks} onChange={(e) => set("tasks", e.target.value)} />
            </Field>
            <div className="field checkbox">
              <label>
                <input type="checkbox" checked={form.preemptible} onChange={(e) => set("preemptible", e.target.checked)} /> Preemptible (may borrow
                idle GPUs beyond the quota)
              </label>
            </div>
            {Number(form.workers) > 1 && (
              <>
                <div className="field checkbox">
                  <label>
                    <input type="checkbox" checked={form.whole_nodes} onChange={(e) => set("whole_nodes", e.target.checked)} /> Whole nodes (each
                    worker on a node of its own)
                  </label>
                </div>
                <div className="field checkbox">
                  <label>
                    <input type="checkbox" checked={form.same_switch} onChange={(e) => set("same_switch", e.target.checked)} /> Same network switch
                    (waits for one with room)
                  </label>
                </div>
              </>
            )}
          </div>
          <button type="submit" className="primary" disabled={busy}>
            {busy ? "Submitting…" : Number(form.tasks) > 1 ? `Submit ${form.tasks} jobs` : "Submit job"}
          </button>
        </form>
        <aside className="availability" aria-label="Availability">
          <h2>Availability</h2>
          <ErrorBox error={vc.error || cluster.error} />
          {quotaRow && (
            <p>
              VC {form.vc}: <strong>{quotaRow.free.gpus}</strong> of {quotaRow.quota.gpus} {quotaRow.gpu_type} GPUs free in its quota;{" "}
              {quotaRow.cluster_idle_gpus} idle in the cluster.
            </p>
          )}
          {clusterRow && <FragmentationChart gpuType={clusterRow.gpu_type} histogram={clusterRow.fragmentation} />}
          {checking ? (
            <p className="hint" role="status">
              Checking whether this job can start now…
            </p>
          ) : never ? (
            <div className="warning" role="status">
              This job can never start: {never.replace(/\.$/, "")}.
            </div>
          ) : reason ? (
            <div className="warning" role="status">
              This job cannot start now: {reason.replace(/\.$/, "")}.
              {serverAnswer?.estimated_start_at && <> Estimated start: {when(serverAnswer.estimated_start_at)}.</>}
            </div>
          ) : (
            clusterRow && (
              <p className="ok" role="status">
                Resources are free: this job can start now.{startNote && ` ${startNote}`}
              </p>
            )
          )}
        </aside>
      </div>
    </section>
  );
}

/** The wall-time field's hint: the VC's cap and, for an interactive job, what an empty
 * field gives (the VC's interactive default, not its maximum). */
function wallTimeHint(vc: Vc, type: string, maxMinutes: number | undefined): string {
  const cap = `at most ${duration(vc.max_wall_time)} (${maxMinutes} min) in VC ${vc.name}`;
  if (type !== "interactive") return cap;
  const given = Math.min(vc.interactive_wall_time, vc.max_wall_time);
  return `empty: ${duration(given)} (${Math.floor(given / 60)} min) for an interactive job; ${cap}`;
}
