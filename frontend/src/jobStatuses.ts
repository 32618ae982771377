// A job's statuses and their groups, typed from the API's generated types. The groups the
// backend names (ACTIVE_STATUSES, PENDING_STATUSES, TERMINAL_STATUSES in
// backend/jobs/models.py) carry its names, and tsc checks each against the schema component
// the backend publishes for it (ActiveStatusEnum...): after `make api-types`, a group changed
// in the backend fails the type check here until it is changed here too. The other groups
// are the dashboard's own, built from those.
import type { Schemas } from "./api";

export type JobStatus = Schemas["JobStatusEnum"];

/** The members of `Group` that `Listed` leaves out: `never` when it lists them all. */
type Missing<Group, Listed extends readonly unknown[]> = Exclude<Group, Listed[number]>;

/** `statuses`, which tsc checks are exactly the members of `Group`: one outside it, or one
 * of it left out (named in the error as `missing`), fails the type check. */
export function exactly<Group extends JobStatus>() {
  return <const Listed extends readonly Group[]>(
    statuses: Listed & ([Missing<Group, Listed>] extends [never] ? unknown : { missing: Missing<Group, Listed> }),
  ): readonly Group[] => statuses;
}

/** Every status, in the backend's order (JobStatus). */
export const JOB_STATUSES = exactly<JobStatus>()([
  "unapproved", "queued", "scheduling", "running", "pausing", "paused",
  "killing", "killed", "finished", "failed", "timeout",
]);
/** The job holds cluster resources. */
export const ACTIVE_STATUSES = exactly<Schemas["ActiveStatusEnum"]>()(["scheduling", "running", "pausing", "killing"]);
/** The job waits for resources (or for a VC admin's approval first). */
export const PENDING_STATUSES = exactly<Schemas["PendingStatusEnum"]>()(["unapproved", "queued"]);
/** The job is over. */
export const TERMINAL_STATUSES = exactly<Schemas["TerminalStatusEnum"]>()(["killed", "finished", "failed", "timeout"]);

/** Neither over nor paused: the job moves on by itself (its page keeps polling), and a VC
 * admin may still change it. */
export const PENDING_OR_ACTIVE_STATUSES: readonly JobStatus[] = [...PENDING_STATUSES, ...ACTIVE_STATUSES];
/** Its owner may pause it (the backend's pause_job: a waiting job is paused at once, one that
 * was placed via `pausing`). */
export const PAUSABLE_STATUSES: readonly JobStatus[] = [...PENDING_STATUSES, "scheduling", "running"];
/** Its processes were started and its wall time runs: running, or being stopped. */
export const RUNNING_OR_STOPPING_STATUSES: readonly JobStatus[] = ["running", "pausing", "killing"];

/** Whether `status` is one of `group`'s. */
export function isIn<Group extends JobStatus>(status: JobStatus, group: readonly Group[]): status is Group {
  return (group as readonly JobStatus[]).includes(status);
}
