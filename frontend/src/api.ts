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

// The API's types, generated from the backend's OpenAPI schema (src/generated/openapi.d.ts;
// deploy/api-types.sh): every answer the dashboard reads, its JSON fields included, is
// described there. Only what the schema cannot say is stated here (Page, Present).
import type { components } from "./generated/openapi";

/** A paginated list: what the schema's Paginated...List types share. */
export type Page<T> = Omit<Schemas["PaginatedNodeRepairList"], "results"> & { results: T[] };

/** An answer as it comes: DRF writes every field of a serializer, so none is missing,
 * although the schema marks those with a default optional (they are, in requests). */
export type Present<T> = T extends (infer I)[]
  ? Present<I>[]
  : T extends object
    ? { [K in keyof T]-?: Present<Exclude<T[K], undefined>> }
    : T;

type AllSchemas = components["schemas"];
/** The schema's components, as answers carry them (see Present). */
export type Schemas = { [K in keyof AllSchemas]: Present<AllSchemas[K]> };
/** The schema's components, as requests send them (optional fields may be left out). */
export type RequestSchemas = AllSchemas;

export type Tenancy = Schemas["Tenancy"];
export type Me = Schemas["Me"];
/** Who is signed in (`me` null when no one is), and how tenants are kept apart (said to a
 * signed-in user only, although Present marks it always there). */
export type Session = Schemas["Session"];
export type GpuType = Schemas["GpuType"];

/** GPUs, CPUs and memory (MiB). */
export type Resources = Schemas["Resources"];
/** A VC's quota and use of one GPU type (the VC detail's `resources`). */
export type VcResources = Schemas["VcResources"];
/** A VC's detail: its settings and, per GPU type, its resources. */
export type Vc = Schemas["VirtualClusterDetail"];

export type Job = Schemas["JobDetail"];
export type JobSummary = Schemas["JobSummary"];
export type JobEvent = Schemas["JobEvent"];
export type JobAttempt = Schemas["JobAttempt"];
/** One GPU's utilisation: [unix seconds, utilisation %] pairs. */
export type GpuSeries = Schemas["GpuSeries"];
export type GpuUtilisation = Schemas["GpuUtilisation"];
export type SubmittedArray = Schemas["JobArraySubmitted"];
/** A batch action's answer: per job, `status` when it was applied, `error` when not (each
 * absent otherwise, so these are not Present). */
export type BatchAnswer = AllSchemas["JobBatchResult"];
export type BatchResult = BatchAnswer["results"][number];

export type NodeFault = Schemas["NodeFault"];
export type NodeRepair = Schemas["NodeRepair"];
export type NodeRepairDetail = Schemas["NodeRepairDetail"];

export type Fragment = Schemas["Fragment"];
export type ClusterRow = Schemas["ClusterRow"];
export type ClusterSummary = Schemas["ClusterSummary"];
export type VcUsage = Schemas["VcUsageRow"];
export type GpuHours = Schemas["GpuHours"];
