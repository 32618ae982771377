// What a job's page says of an elastic job's size and of a deadline's admission answer.
import type { Job } from "../api";
import { when } from "../format";

/** "2..4 workers; now 3: 2 booked, 1 borrowed" for an elastic job; "" for a fixed one.
 * Booked workers are within the VC's quota (its fewest); those above are borrowed. */
export function elasticSize(job: Job): string {
  if (!(job.min_workers < job.max_workers)) return ""; // fixed (or not said)
  const range = `${job.min_workers}..${job.max_workers} workers`;
  const placed = Array.isArray(job.placement) ? job.placement.length : 0;
  if (!placed) return `${range}; it asks for ${job.workers}, starting with at least ${job.min_workers}`;
  const booked = job.borrowing ? 0 : Math.min(placed, job.min_workers);
  return `${range}; now ${placed}: ${booked} booked, ${placed - booked} borrowed`;
}

/** The admission answer the job got at submit, as a sentence; "" when it got none. */
export function admissionAnswer(job: Job): string {
  const finish = job.earliest_finish ? when(job.earliest_finish) : null;
  switch (job.admission) {
    case "meets":
      return `meets its deadline with at least ${job.admission_share} worker(s) from submit${finish ? ` (earliest finish ${finish})` : ""}`;
    case "flagged":
    case "best_effort": {
      const why = finish ? `the earliest finish was ${finish}` : "it could not start on the cluster as it was";
      return `cannot meet its deadline: ${why}; accepted ${job.admission === "flagged" ? "and flagged" : "best-effort"}`;
    }
    default:
      return "";
  }
}
