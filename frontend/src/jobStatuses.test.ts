import { describe, expect, it } from "vitest";
import type { Schemas } from "./api";
import {
  ACTIVE_STATUSES,
  exactly,
  isIn,
  JOB_STATUSES,
  PAUSABLE_STATUSES,
  PENDING_OR_ACTIVE_STATUSES,
  PENDING_STATUSES,
  TERMINAL_STATUSES,
} from "./jobStatuses";

describe("job status groups", () => {
  it("with paused, split every status into waiting, holding resources and over, each once", () => {
    const grouped = [...PENDING_STATUSES, ...ACTIVE_STATUSES, "paused", ...TERMINAL_STATUSES];
    expect([...grouped].sort()).toEqual([...JOB_STATUSES].sort());
    expect(new Set(grouped).size).toBe(JOB_STATUSES.length);
  });

  it("poll and offer changes for a job that is neither over nor paused, and kill any job not over", () => {
    expect(JOB_STATUSES.filter((status) => isIn(status, PENDING_OR_ACTIVE_STATUSES))).toEqual([
      "unapproved", "queued", "scheduling", "running", "pausing", "killing",
    ]);
    expect(JOB_STATUSES.filter((status) => !isIn(status, TERMINAL_STATUSES))).toEqual([
      "unapproved", "queued", "scheduling", "running", "pausing", "paused", "killing",
    ]);
    expect([...PAUSABLE_STATUSES].sort()).toEqual(["queued", "running", "scheduling", "unapproved"]);
  });

  it("are checked against the schema's groups by the type check", () => {
    // Each line below fails `tsc` (npm run typecheck) unless marked as an expected error.
    // @ts-expect-error: "killing" is left out
    exactly<Schemas["ActiveStatusEnum"]>()(["scheduling", "running", "pausing"]);
    // @ts-expect-error: "paused" is not a pending status
    exactly<Schemas["PendingStatusEnum"]>()(["unapproved", "queued", "paused"]);
    expect(exactly<Schemas["PendingStatusEnum"]>()(["queued", "unapproved"])).toEqual(["queued", "unapproved"]);
  });
});
