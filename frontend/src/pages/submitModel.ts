// The submit form's values, how they become a submission, and why a job may not start now.
import type { ClusterRow, GpuType, Job, RequestSchemas, Vc } from "../api";
import jobPresets from "./jobPresets.json";

type Submission = RequestSchemas["JobSubmitRequest"];

export interface SubmitForm {
  vc: string;
  name: string;
  type: string;
  gpu_type: string;
  workers: string;
  gpus_per_worker: string;
  cpus_per_worker: string;
  memory_per_worker: string;
  image: string;
  command: string;
  env: string;
  data_path: string;
  output_path: string;
  preemptible: boolean;
  /** More than one worker: each on a node of its own, all of it. */
  whole_nodes: boolean;
  /** More than one worker: all under one network switch (it waits for one). */
  same_switch: boolean;
  max_retries: string;
  /** Which failures spend retries: "infrastructure" (user errors fail at once) or "any". */
  retry_on: string;
  wall_minutes: string;
  ports: string;
  /** How many jobs of this spec to submit as one job array ("1": a single job). */
  tasks: string;
  /** When it must have finished, as a datetime-local input gives it ("": none). */
  deadline: string;
  /** Elastic: the fewest and the most workers ("": fixed at workers). */
  min_workers: string;
  max_workers: string;
  /** Samples/s at 1, 2, ... workers, "100, 190, 270" ("": none, or learned). */
  throughput: string;
  /** The samples (or steps) the job needs ("": not said). */
  work: string;
}

export function emptyForm(vc: string): SubmitForm {
  return {
    vc,
    name: "",
    type: "batch",
    gpu_type: "",
    workers: "1",
    gpus_per_worker: "1",
    cpus_per_worker: "",
    memory_per_worker: "",
    image: "",
    command: "",
    env: "",
    data_path: "",
    output_path: "",
    preemptible: false,
    whole_nodes: false,
    same_switch: false,
    max_retries: "",
    retry_on: "infrastructure",
    wall_minutes: "",
    ports: "",
    tasks: "1",
    deadline: "",
    min_workers: "",
    max_workers: "",
    throughput: "",
    work: "",
  };
}

/** The form filled from an earlier job ("Clone"). */
export function formFromJob(job: Job): SubmitForm {
  return {
    vc: job.vc,
    name: job.name,
    type: job.type,
    gpu_type: job.gpu_type,
    workers: String(job.workers),
    gpus_per_worker: String(job.gpus_per_worker),
    cpus_per_worker: String(job.cpus_per_worker),
    memory_per_worker: String(job.memory_per_worker),
    image: job.image ?? "",
    command: job.command ?? "",
    env: Object.entries(job.env ?? {})
      .map(([key, value]) => `${key}=${value}`)
      .join("\n"),
    data_path: job.data_path ?? "",
    output_path: job.output_path ?? "",
    preemptible: job.preemptible,
    whole_nodes: job.whole_nodes ?? false,
    same_switch: job.same_switch ?? false,
    max_retries: String(job.max_retries),
    retry_on: job.retry_on ?? "infrastructure",
    wall_minutes: String(Math.round(job.max_wall_time / 60)),
    ports: (job.ports ?? []).map((exposed) => `${exposed.name}=${exposed.port}`).join(", "),
    tasks: "1",
    deadline: "", // an earlier job's deadline has most likely passed
    min_workers: job.min_workers !== job.max_workers ? String(job.min_workers) : "",
    max_workers: job.min_workers !== job.max_workers ? String(job.max_workers) : "",
    throughput: (job.throughput ?? []).join(", "),
    work: job.work != null ? String(job.work) : "",
  };
}

/** "jupyter=8888, tensorboard=6006" as the API's ports; what is not NAME=PORT is reported. */
export function parsePorts(text: string): { ports: { name: string; port: number }[]; bad: string[] } {
  const ports: { name: string; port: number }[] = [];
  const bad: string[] = [];
  for (const raw of text.split(/[,\n]/)) {
    const item = raw.trim();
    if (!item) continue;
    const match = /^([a-z0-9-]+)\s*=\s*(\d+)$/.exec(item);
    if (match) ports.push({ name: match[1], port: Number(match[2]) });
    else bad.push(item);
  }
  return { ports, bad };
}

/** "100, 190, 270" as a throughput curve; what is not a number is reported. */
export function parseThroughput(text: string): { curve: number[]; bad: string[] } {
  const items = text.split(/[,\s]+/).filter(Boolean);
  const bad = items.filter((item) => !Number.isFinite(Number(item)));
  return { curve: bad.length ? [] : items.map(Number), bad };
}

/** Interactive jobs the form can start from: a shell that keeps its GPUs until the wall
 * time or a kill (reached by SSH or VS Code), and servers opened in the browser through
 * /endpoints/<job>/<name>/ (they admit the portal's proxy by the job's token, given to
 * them in the environment: a command line is visible to every account of the host).
 * Written once in jobPresets.json, which the backend's tests run as jobs. */
export const JOB_PRESETS: { label: string; name: string; command: string; ports: string }[] = jobPresets;

/** "KEY=value" lines as an object; the lines that are not are reported. */
export function parseEnv(text: string): { env: Record<string, string>; bad: string[] } {
  const env: Record<string, string> = {};
  const bad: string[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const at = line.indexOf("=");
    if (at <= 0) bad.push(line);
    else env[line.slice(0, at).trim()] = line.slice(at + 1);
  }
  return { env, bad };
}

/** The body of POST /api/v1/jobs/: only what the user filled in, numbers as numbers. */
export function submission(form: SubmitForm): Submission {
  const body: Submission = {
    vc: form.vc,
    type: form.type as Submission["type"],
    command: form.command,
    workers: Number(form.workers),
    gpus_per_worker: Number(form.gpus_per_worker),
    preemptible: form.preemptible,
    env: parseEnv(form.env).env,
  };
  const text = ["name", "gpu_type", "image", "data_path", "output_path"] as const;
  for (const key of text) if (String(form[key]).trim()) body[key] = String(form[key]).trim();
  if (form.cpus_per_worker.trim()) body.cpus_per_worker = Number(form.cpus_per_worker);
  if (form.memory_per_worker.trim()) {
    const memory = form.memory_per_worker.trim();
    body.memory_per_worker = /^\d+$/.test(memory) ? Number(memory) : memory;
  }
  if (form.max_retries.trim()) body.max_retries = Number(form.max_retries);
  if (form.retry_on !== "infrastructure") body.retry_on = form.retry_on as Submission["retry_on"];
  if (form.wall_minutes.trim()) body.max_wall_time = Math.round(Number(form.wall_minutes) * 60);
  if (form.deadline) body.deadline = new Date(form.deadline).toISOString();
  if (form.min_workers.trim()) body.min_workers = Number(form.min_workers);
  if (form.max_workers.trim()) {
    body.max_workers = Number(form.max_workers);
    body.workers = body.max_workers; // an elastic job asks for its most
  }
  const { curve } = parseThroughput(form.throughput);
  if (curve.length) body.throughput = curve;
  if (form.work.trim()) body.work = Number(form.work);
  if (form.whole_nodes) body.whole_nodes = true;
  if (form.same_switch) body.same_switch = true;
  const { ports } = parsePorts(form.ports);
  if (ports.length) body.ports = ports;
  const tasks = Number(form.tasks.trim() || "1");
  if (tasks !== 1) body.array = { count: tasks };
  return body;
}

/** The VC's t-shirt sizes for a GPU type: 1, 2, 4 and 8 GPUs with their CPUs and memory. */
export function presets(gpuType: GpuType | undefined): { gpus: number; cpus: number; memory: number }[] {
  if (!gpuType) return [];
  const cpuOnly = gpuType.name === "cpu";
  return [1, 2, 4, 8].map((units) => ({
    gpus: cpuOnly ? 0 : units,
    cpus: Number(gpuType.cpus_per_gpu) * units,
    memory: Number(gpuType.memory_per_gpu) * units,
  }));
}

/** Why a job of this shape cannot start now, from the cluster's free GPUs; null if it can. */
export function localStartCheck(
  workers: number,
  gpusPerWorker: number,
  row: ClusterRow | undefined,
  freeInQuota: number | undefined,
  preemptible: boolean,
): string | null {
  if (!row || gpusPerWorker <= 0) return null;
  const total = workers * gpusPerWorker;
  const fitting = row.fragmentation
    .filter((bucket) => bucket.free_gpus >= gpusPerWorker)
    .reduce((sum, bucket) => sum + bucket.nodes * Math.floor(bucket.free_gpus / gpusPerWorker), 0);
  const largest = Math.max(0, ...row.fragmentation.filter((b) => b.nodes > 0).map((b) => b.free_gpus));
  if (!preemptible && freeInQuota !== undefined && total > freeInQuota) {
    return `needs ${total} ${row.gpu_type} GPUs; the VC has ${freeInQuota} free in its quota`;
  }
  if (fitting < workers) {
    return `needs ${workers} x ${gpusPerWorker} ${row.gpu_type} on free nodes; largest free block is ${largest}`;
  }
  return null;
}

/** The fields whose refusal means no node or quota could ever take the job as it is. */
const NEVER_FITS = ["gpus_per_worker", "cpus_per_worker", "memory_per_worker", "workers", "gpu_type", "node_selector"];

/** Why the server refused to preview the job (a worker larger than any node, more than
 * the VC's quota), as the rest of a sentence; null when nothing says it can never start. */
export function neverStartReason(fields: Record<string, string[]>): string | null {
  const message = NEVER_FITS.map((name) => fields[name]?.[0]).find(Boolean);
  return message ? message.charAt(0).toLowerCase() + message.slice(1) : null;
}

/** Where the form opens: the VC and GPU type where a job of the form's first shape (one
 * worker, one GPU; CPUs only for a CPU-only type) can start now, GPU types first and the
 * most free quota first; else the one with the most free quota. Null without candidates. */
export function defaultChoice(
  vcs: Vc[],
  types: GpuType[],
  cluster: ClusterRow[],
): { vc: string; gpu_type: string } | null {
  const candidates = vcs.flatMap((vc, order) =>
    (vc.resources ?? []).flatMap((row) => {
      const type = types.find((one) => one.name === row.gpu_type);
      if (!type) return [];
      const clusterRow = cluster.find((one) => one.gpu_type === row.gpu_type);
      const cpuOnly = type.name === "cpu";
      const cpusNeeded = Number(type.cpus_per_gpu);
      const startable = !clusterRow
        ? false
        : cpuOnly
          ? row.free.cpus >= cpusNeeded && Number(clusterRow.cpus_total) - Number(clusterRow.cpus_used) >= cpusNeeded
          : row.free.gpus >= 1 && clusterRow.gpus_free >= 1 && localStartCheck(1, 1, clusterRow, row.free.gpus, false) === null;
      return [{ vc: vc.name, gpu_type: row.gpu_type, startable, cpuOnly, gpus: row.free.gpus, cpus: row.free.cpus, order }];
    }),
  );
  candidates.sort(
    (a, b) =>
      Number(b.startable) - Number(a.startable) ||
      Number(a.cpuOnly) - Number(b.cpuOnly) ||
      b.gpus - a.gpus ||
      b.cpus - a.cpus ||
      a.order - b.order,
  );
  return candidates.length ? { vc: candidates[0].vc, gpu_type: candidates[0].gpu_type } : null;
}
