// One typed hook (reads) or function (writes) per endpoint the dashboard uses. Their types
// come from the backend's OpenAPI schema (src/generated/openapi.d.ts, made by
// deploy/api-types.sh): a path that is not in the schema, or an answer read as something
// it is not, fails `tsc`. Paginated lists answer a Page (count, next, previous, results);
// the others answer a plain array, as the schema says.
import { api, type BatchAnswer, type Me, type Present, type Session } from "./api";
import type { paths } from "./generated/openapi";
import { useApi, type Loaded } from "./components/common";


type Method = "get" | "post" | "put" | "patch" | "delete";
type Operation<P extends keyof paths, M extends Method> = NonNullable<paths[P][M]>;
type Json<R> = R extends { content: { "application/json": infer T } } ? T : undefined;
type Success<R> = 200 extends keyof R ? R[200] : 201 extends keyof R ? R[201] : 202 extends keyof R ? R[202] : never;

/** What `M P` answers when it succeeds (undefined for 204 No Content). */
export type Answer<P extends keyof paths, M extends Method = "get"> =
  Operation<P, M> extends { responses: infer R } ? Present<Json<Success<R>>> : never;

/** The JSON body `M P` takes. */
export type Body<P extends keyof paths, M extends Method> =
  Operation<P, M> extends { requestBody?: { content: { "application/json": infer B } } } ? B : never;

type AnyOperation<P extends keyof paths> = NonNullable<paths[P][Method]>;
type PathParams<P extends keyof paths> = AnyOperation<P> extends { parameters: { path: infer A } } ? A : never;
/** The path's parameters, or none for a path without any. */
type Params<P extends keyof paths> = [PathParams<P>] extends [never] ? Record<string, never> : PathParams<P>;

/** `template` with its {parameters} filled in, and `query` (already encoded) after a "?". */
export function pathTo<P extends keyof paths>(template: P, params: Params<P>, query = ""): string {
  const values = params as Record<string, string | number>;
  const path = String(template).replace(/\{(\w+)\}/g, (_, name: string) => encodeURIComponent(String(values[name])));
  return query ? `${path}?${query}` : path;
}

/** GET `template` (null params: not yet, nothing is asked), polled every `refreshMs`. */
function useGet<P extends keyof paths>(
  template: P,
  params: Params<P> | null,
  query = "",
  refreshMs = 0,
): Loaded<Answer<P>> {
  return useApi<Answer<P>>(params === null ? null : pathTo(template, params, query), refreshMs);
}

function send<P extends keyof paths, M extends Exclude<Method, "get">>(
  method: M,
  template: P,
  params: Params<P>,
  body?: Body<P, M>,
): Promise<Answer<P, M>> {
  return api<Answer<P, M>>(pathTo(template, params), { method: method.toUpperCase(), body });
}

const none = {} as Record<string, never>;

// Sessions.
export const getSession = () => api<Session>(pathTo("/api/v1/auth/session/", none));
export const logIn = (body: Body<"/api/v1/auth/login/", "post">) =>
  api<Me>(pathTo("/api/v1/auth/login/", none), { method: "POST", body });
export const logOut = () => send("post", "/api/v1/auth/logout/", none);

// Virtual clusters.
/** Paginated. */
export const useVcs = (query: string | null) => useGet("/api/v1/vcs/", query === null ? null : none, query ?? "");
export const useVc = (name: string | null, refreshMs = 0) => useGet("/api/v1/vcs/{name}/", name ? { name } : null, "", refreshMs);
export const getVc = (name: string, signal?: AbortSignal) =>
  api<Answer<"/api/v1/vcs/{name}/">>(pathTo("/api/v1/vcs/{name}/", { name }), { signal });
export const updateVc = (name: string, body: Body<"/api/v1/vcs/{name}/", "patch">) => send("patch", "/api/v1/vcs/{name}/", { name }, body);
export const useVcQueue = (name: string, refreshMs = 0) => useGet("/api/v1/vcs/{name}/queue/", { name }, "", refreshMs);
export const useVcDeadlines = (name: string, refreshMs = 0) => useGet("/api/v1/vcs/{name}/deadlines/", { name }, "", refreshMs);
export const useVcMembers = (name: string) => useGet("/api/v1/vcs/{name}/members/", { name });
export const setVcMember = (name: string, body: Body<"/api/v1/vcs/{name}/members/", "post">) => send("post", "/api/v1/vcs/{name}/members/", { name }, body);
export const removeVcMember = (name: string, username: string) => send("delete", "/api/v1/vcs/{name}/members/{username}/", { name, username });
export const useVcQuotas = (name: string) => useGet("/api/v1/vcs/{name}/quotas/", { name });
export const setVcQuotas = (name: string, body: Body<"/api/v1/vcs/{name}/quotas/", "put">) => send("put", "/api/v1/vcs/{name}/quotas/", { name }, body);

// Jobs.
/** Paginated. */
export const useJobs = (query: string | null, refreshMs = 0) => useGet("/api/v1/jobs/", query === null ? null : none, query ?? "", refreshMs);
export const useJob = (id: string | null | undefined, refreshMs = 0) => useGet("/api/v1/jobs/{id}/", id ? { id } : null, "", refreshMs);
export const useJobEvents = (id: string, refreshMs = 0) => useGet("/api/v1/jobs/{id}/events/", { id }, "", refreshMs);
export const useJobAttempts = (id: string, refreshMs = 0) => useGet("/api/v1/jobs/{id}/attempts/", { id }, "", refreshMs);
export const useJobMetrics = (id: string | null, refreshMs = 0) => useGet("/api/v1/jobs/{id}/metrics/", id ? { id } : null, "", refreshMs);
export const getLogTail = (id: string, query: string) => api<Answer<"/api/v1/jobs/{id}/log/tail/">>(pathTo("/api/v1/jobs/{id}/log/tail/", { id }, query));
export const submitJob = (body: Body<"/api/v1/jobs/", "post">) => send("post", "/api/v1/jobs/", none, body);
export const previewJob = (body: Body<"/api/v1/jobs/preview/", "post">, signal?: AbortSignal) =>
  api<Answer<"/api/v1/jobs/preview/", "post">>(pathTo("/api/v1/jobs/preview/", none), { method: "POST", body, signal });
export type JobAction = "kill" | "pause" | "resume" | "approve";
export const actOnJob = (id: string, action: JobAction) => send("post", `/api/v1/jobs/{id}/${action}/`, { id }, {});
export const changeJob = (id: string, body: Body<"/api/v1/jobs/{id}/", "patch">) => send("patch", "/api/v1/jobs/{id}/", { id }, body);
export const exposePort = (id: string, body: Body<"/api/v1/jobs/{id}/ports/", "post">) => send("post", "/api/v1/jobs/{id}/ports/", { id }, body);
export const actOnJobs = (body: Body<"/api/v1/jobs/batch/", "post">) =>
  // Not Present: a result carries `status` or `error`, not both.
  api<BatchAnswer>(pathTo("/api/v1/jobs/batch/", none), { method: "POST", body });
export const actOnJobArray = (id: string, action: Exclude<JobAction, "approve">) =>
  send("post", `/api/v1/job-arrays/{id}/${action}/`, { id }, {});

// Accounts.
export const useAllowedIps = () => useGet("/api/v1/me/allowed-ips/", none);
export const addAllowedIp = (body: Body<"/api/v1/me/allowed-ips/", "post">) => send("post", "/api/v1/me/allowed-ips/", none, body);
export const removeAllowedIp = (id: number) => send("delete", "/api/v1/me/allowed-ips/{id}/", { id });
export const useSshKeys = () => useGet("/api/v1/me/ssh-keys/", none);
export const addSshKey = (body: Body<"/api/v1/me/ssh-keys/", "post">) => send("post", "/api/v1/me/ssh-keys/", none, body);
export const removeSshKey = (id: number) => send("delete", "/api/v1/me/ssh-keys/{id}/", { id });

// The cluster.
export const useGpuTypes = (enabled = true) => useGet("/api/v1/gpu-types/", enabled ? none : null);
/** Paginated. */
export const useNodes = (query: string, refreshMs = 0) => useGet("/api/v1/nodes/", none, query, refreshMs);
export const useClusterSummary = (refreshMs = 0) => useGet("/api/v1/cluster/summary/", none, "", refreshMs);
export const useVcUsage = (refreshMs = 0) => useGet("/api/v1/cluster/vc-usage/", none, "", refreshMs);
/** Paginated. */
export const useNodeRepairs = (query: string | null, refreshMs = 0) =>
  useGet("/api/v1/node-repairs/", query === null ? null : none, query ?? "", refreshMs);
export const useNodeRepair = (name: string) => useGet("/api/v1/node-repairs/{name}/", { name });
export const moveNode = (name: string, body: Body<"/api/v1/node-repairs/{name}/move/", "post">) =>
  send("post", "/api/v1/node-repairs/{name}/move/", { name }, body);
/** Paginated. */
export const useNodeFaults = (query: string | null, refreshMs = 0) => useGet("/api/v1/node-faults/", query === null ? null : none, query ?? "", refreshMs);

// Usage.
export const useGpuHours = (query: string) => useGet("/api/v1/usage/gpu-hours/", none, query);
export const useJobGpuHours = (query: string | null, refreshMs = 0) =>
  useGet("/api/v1/usage/gpu-hours/", query === null ? null : none, query ?? "", refreshMs);

// Storage.
export const useStorageRoots = () => useGet("/api/v1/storage/roots/", none);
/** Queues a scan or a dry run; the answer's `detail` says so. */
export const actOnStorageRoot = (name: string, what: "scan" | "expiry-dry-run") =>
  send("post", `/api/v1/storage/roots/{name}/${what}/`, { name });
/** Paginated, as are the four below. */
export const useScans = (query: string | null, refreshMs = 0) => useGet("/api/v1/storage/scans/", query === null ? null : none, query ?? "", refreshMs);
export const useStorageUsage = (query: string | null) => useGet("/api/v1/storage/usage/", query === null ? null : none, query ?? "");
export const useLargestPaths = (query: string) => useGet("/api/v1/storage/largest-paths/", none, query);
export const useExpiryRuns = (query: string) => useGet("/api/v1/storage/expiry-runs/", none, query);
export const useExpiringFiles = (query: string) => useGet("/api/v1/storage/expiring-files/", none, query);
