// The dashboard talks only to the public REST API, with the session cookie and CSRF token.

export type FieldErrors = Record<string, string[]>;

/** An API answer that was not 2xx: its status, a message, and per-field errors. */
export class ApiError extends Error {
  status: number;
  fields: FieldErrors;

  constructor(status: number, message: string, fields: FieldErrors = {}) {
    super(message);
    this.status = status;
    this.fields = fields;
  }
}

export function csrfToken(): string {
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return match ? decodeURIComponent(match[1]) : "";
}

/** A field's messages; a nested field's (e.g. {"count": ["..."]}) flattened into them. */
function flatMessages(value: unknown): string[] {
  if (Array.isArray(value)) return value.flatMap((item) => (item && typeof item === "object" ? flatMessages(item) : [String(item)]));
  if (value && typeof value === "object") return Object.values(value).flatMap(flatMessages);
  return [String(value)];
}

function messageFor(status: number, body: unknown): [string, FieldErrors] {
  if (status === 401 || status === 403) {
    const detail = (body as { detail?: string } | null)?.detail;
    return [detail ?? "You are not allowed to do this.", {}];
  }
  if (body && typeof body === "object" && !Array.isArray(body)) {
    const fields: FieldErrors = {};
    let detail = "";
    for (const [name, value] of Object.entries(body as Record<string, unknown>)) {
      const messages = flatMessages(value);
      if (name === "detail" || name === "non_field_errors") detail = messages.join(" ");
      else fields[name] = messages;
    }
    if (!detail && Object.keys(fields).length) detail = "Please correct the marked fields.";
    return [detail || `The server answered ${status}.`, fields];
  }
  if (Array.isArray(body)) {
    // A list's errors, item by item (e.g. [{"gpus": ["..."]}, {}]).
    const parts = body.flatMap((item, index) =>
      item && typeof item === "object"
        ? Object.entries(item).map(([name, value]) => `item ${index + 1}, ${name}: ${String(value)}`)
        : [String(item)],
    );
    return [parts.join(" ") || `The server answered ${status}.`, {}];
  }
  if (status >= 500) return ["The server failed; try again, and tell an admin if it persists.", {}];
  return [`The server answered ${status}.`, {}];
}

export async function api<T = unknown>(
  path: string,
  options: { method?: string; body?: unknown; signal?: AbortSignal } = {},
): Promise<T> {
  const method = options.method ?? "GET";
  const headers: Record<string, string> = { Accept: "application/json" };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET") headers["X-CSRFToken"] = csrfToken();
  let response: Response;
  try {
    response = await fetch(path.startsWith("/") ? path : `/api/v1/${path}`, {
      method,
      headers,
      credentials: "same-origin",
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      signal: options.signal,
    });
  } catch (error) {
    if ((error as Error).name === "AbortError") throw error;
    throw new ApiError(0, "Cannot reach the server; check your connection and retry.");
  }
  if (response.status === 204) return undefined as T;
  const text = await response.text();
  let body: unknown = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!response.ok) {
    const [message, fields] = messageFor(response.status, body);
    throw new ApiError(response.status, message, fields);
  }
  return body as T;
}

export interface Page<T> {
  count: number;
  next: string | null;
  previous: string | null;
  results: T[];
}

export interface Me {
  username: string;
  email: string;
  is_cluster_admin: boolean;
  vcs: { name: string; role: "member" | "admin" }[];
  unix_account?: { unix_name: string; uid: number; gid: number } | null;
}

/** How the installation keeps tenants apart (from the session and the cluster summary). */
export interface Tenancy {
  mode: "multi-tenant" | "single-user";
  message: string;
}

export interface Resources {
  gpus: number;
  cpus: number;
  memory: number;
  jobs?: number;
}

export interface Vc {
  name: string;
  description: string;
  notification: string;
  policy: "FIFO" | "RF" | "BF" | "LAS" | "FS";
  max_wall_time: number;
  max_interactive_gpus: number;
  default_max_retries: number;
  user_gpu_limit: number | null;
  // The idle watch: a warning time of null is off.
  idle_util_percent?: number;
  idle_warn_minutes?: number | null;
  idle_kill_minutes?: number;
  interactive_idle_warn_minutes?: number | null;
  interactive_idle_kill_minutes?: number;
  my_role: "member" | "admin" | null;
  resources?: {
    gpu_type: string;
    quota: Resources;
    used: Resources;
    queued: Resources;
    free: Resources;
    running_jobs?: number;
    queued_jobs?: number;
    borrowed_gpus?: number;
    cluster_idle_gpus: number;
  }[];
}

export interface GpuType {
  name: string;
  cpus_per_gpu: number;
  memory_per_gpu: number;
}

export interface Fragment {
  free_gpus: number;
  nodes: number;
}

export interface ClusterRow {
  gpu_type: string;
  nodes: number;
  schedulable_nodes: number;
  gpus_total: number;
  gpus_used: number;
  gpus_free: number;
  cpus_total: number;
  cpus_used: number;
  memory_total: number;
  memory_used: number;
  fragmentation: Fragment[];
}

export interface Job {
  id: string;
  name: string;
  owner: string;
  vc: string;
  type: string;
  status: string;
  status_message: string;
  insight_message?: string;
  repair_message?: string;
  image: string;
  command?: string;
  working_dir?: string;
  env?: Record<string, string>;
  workers: number;
  gpu_type: string;
  gpus_per_worker: number;
  cpus_per_worker: number;
  memory_per_worker: number;
  preemptible: boolean;
  priority: number;
  max_retries: number;
  retries_used: number;
  max_wall_time: number;
  data_path?: string;
  output_path?: string;
  node_selector?: Record<string, string>;
  placement?: unknown;
  exit_code: number | null;
  failure_class: string;
  failure_rule?: string;
  attempt?: number;
  estimated_start_at: string | null;
  submitted_at: string;
  started_at: string | null;
  finished_at: string | null;
  ports?: { name: string; port: number }[];
  endpoints?: {
    ssh?: string;
    ssh_config?: string;
    vscode?: string;
    host_key_fingerprint?: string;
    ports?: { name: string; port: number; url: string }[];
  };
  run_as?: string;
  limits?: string;
  /** The job array it is a task of, and its index there (null for a single job). */
  array?: string | null;
  array_index?: number | null;
}

/** What submitting a job array answers. */
export interface SubmittedArray {
  array: string;
  size: number;
  jobs: string[];
}

export interface BatchResult {
  id: string;
  ok: boolean;
  status?: string;
  error?: string;
}
