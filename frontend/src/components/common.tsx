import { useCallback, useEffect, useRef, useState, type ReactNode } from "react";
import { ApiError, type Tenancy, api } from "../api";
import type { JobStatus } from "../jobStatuses";

const BADGE: Record<JobStatus, string> = {
  running: "green",
  finished: "blue",
  queued: "amber",
  scheduling: "amber",
  unapproved: "amber",
  pausing: "grey",
  paused: "grey",
  killing: "red",
  killed: "grey",
  failed: "red",
  timeout: "red",
};

export function StatusBadge({ status }: { status: JobStatus }) {
  return <span className={`badge badge-${BADGE[status] ?? "grey"}`}>{status}</span>;
}

export function Loading({ what }: { what: string }) {
  return (
    <p className="loading" role="status" aria-live="polite">
      Loading {what}…
    </p>
  );
}

export function Empty({ children }: { children: ReactNode }) {
  return <p className="empty">{children}</p>;
}

export function ErrorBox({ error, retry }: { error: unknown; retry?: () => void }) {
  if (!error) return null;
  const message = error instanceof Error ? error.message : String(error);
  const status = error instanceof ApiError ? error.status : 0;
  if (status === 401) {
    return (
      <div className="error" role="alert">
        <strong>Your session has ended.</strong> <a href={`/login?next=${encodeURIComponent(window.location.pathname)}`}>Sign in again</a>.
      </div>
    );
  }
  const hint =
    status === 404
      ? "It does not exist, or it is not in one of your VCs."
      : status === 403
        ? "Ask a VC admin or a cluster admin if you need this."
        : "";
  return (
    <div className="error" role="alert">
      <strong>{message}</strong>
      {hint && <span> {hint}</span>}
      {retry && (
        <button type="button" className="link" onClick={retry}>
          Retry
        </button>
      )}
    </div>
  );
}

export interface Loaded<T> {
  data: T | undefined;
  error: unknown;
  loading: boolean;
  reload: () => void;
}

/** GET `path` (again whenever it changes, and on reload()); null skips the request. */
export function useApi<T>(path: string | null, refreshMs = 0): Loaded<T> {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<unknown>(null);
  const [loading, setLoading] = useState(path !== null);
  const [tick, setTick] = useState(0);
  const reload = useCallback(() => setTick((n) => n + 1), []);
  const first = useRef(true);
  useEffect(() => {
    first.current = true;
  }, [path]);
  useEffect(() => {
    if (path === null) {
      setLoading(false);
      return;
    }
    const controller = new AbortController();
    if (first.current) setLoading(true);
    api<T>(path, { signal: controller.signal })
      .then((value) => {
        setData(value);
        setError(null);
      })
      .catch((reason) => {
        if ((reason as Error).name !== "AbortError") setError(reason);
      })
      .finally(() => {
        if (!controller.signal.aborted) {
          setLoading(false);
          first.current = false;
        }
      });
    return () => controller.abort();
  }, [path, tick]);
  useEffect(() => {
    if (!refreshMs || path === null) return;
    const timer = window.setInterval(reload, refreshMs);
    return () => window.clearInterval(timer);
  }, [refreshMs, path, reload]);
  return { data, error, loading, reload };
}

/** A labelled form field with its API errors under it (and tied to it for screen readers). */
export function Field({
  label,
  name,
  errors,
  hint,
  children,
}: {
  label: string;
  name: string;
  errors?: Record<string, string[]>;
  hint?: ReactNode;
  children: ReactNode;
}) {
  const messages = errors?.[name];
  return (
    <div className={`field${messages ? " invalid" : ""}`}>
      <label htmlFor={`f-${name}`}>{label}</label>
      {children}
      {hint && <small className="hint">{hint}</small>}
      {messages && (
        <div className="field-error" id={`f-${name}-error`} role="alert">
          {messages.join(" ")}
        </div>
      )}
    </div>
  );
}

/** Said plainly on every page when jobs are not isolated from one another (single-user mode). */
export function TenancyNotice({ tenancy }: { tenancy?: Tenancy | null }) {
  if (!tenancy || tenancy.mode !== "single-user") return null;
  return (
    <div className="notice warning" role="note" aria-label="Single-user mode">
      {tenancy.message}
    </div>
  );
}
