// How numbers, sizes and times read on screen.
import { isIn, type JobStatus, RUNNING_OR_STOPPING_STATUSES } from "./jobStatuses";

/** Seconds as "2d 3h", "1h 05m", "4m 10s". */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  const days = Math.floor(s / 86400);
  const hours = Math.floor((s % 86400) / 3600);
  const minutes = Math.floor((s % 3600) / 60);
  if (days) return `${days}d ${hours}h`;
  if (hours) return `${hours}h ${String(minutes).padStart(2, "0")}m`;
  if (minutes) return `${minutes}m ${String(s % 60).padStart(2, "0")}s`;
  return `${s}s`;
}

/** MiB (as the API answers memory) as "512 MiB", "64 GiB", "1.5 TiB". */
export function memory(mib: number): string {
  if (mib >= 1024 * 1024) return `${+(mib / 1024 / 1024).toFixed(1)} TiB`;
  if (mib >= 1024) return `${+(mib / 1024).toFixed(1)} GiB`;
  return `${mib} MiB`;
}

export function when(iso: string | null | undefined): string {
  if (!iso) return "—";
  const date = new Date(iso);
  return date.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}

/** Seconds left before a running job's wall-time limit; null when it does not apply. */
export function timeLeft(
  job: { status: JobStatus; started_at: string | null; max_wall_time: number },
  now: number = Date.now(),
): number | null {
  if (!job.started_at || !isIn(job.status, RUNNING_OR_STOPPING_STATUSES)) return null;
  return (Date.parse(job.started_at) + job.max_wall_time * 1000 - now) / 1000;
}

/** Bytes as "812 B", "4.2 KiB", "1.5 GiB", "3 TiB". */
export function size(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? value : +value.toFixed(1)} ${units[unit]}`;
}
