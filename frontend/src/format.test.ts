import { describe, expect, it } from "vitest";
import { duration, memory, timeLeft } from "./format";
import { localStartCheck, parseEnv } from "./pages/submitModel";

describe("formatting", () => {
  it("reads durations and sizes the way people say them", () => {
    expect([duration(42), duration(250), duration(3900), duration(90000)]).toEqual(["42s", "4m 10s", "1h 05m", "1d 1h"]);
    expect([memory(512), memory(65536), memory(1572864)]).toEqual(["512 MiB", "64 GiB", "1.5 TiB"]);
  });

  it("counts the time left only for jobs that run", () => {
    const now = Date.parse("2026-11-29T12:00:00Z");
    const running = { status: "running" as const, started_at: "2026-11-29T11:30:00Z", max_wall_time: 3600 };
    expect(timeLeft(running, now)).toBe(1800);
    expect(timeLeft({ ...running, status: "finished" }, now)).toBeNull();
    expect(timeLeft({ ...running, status: "queued", started_at: null }, now)).toBeNull();
  });

  it("parses KEY=value lines and reports the others", () => {
    expect(parseEnv("A=1\n# note\nB = x=y\nbroken\n=nokey")).toEqual({ env: { A: "1", B: " x=y" }, bad: ["broken", "=nokey"] });
  });

  it("says why a job cannot start from the quota and the free blocks", () => {
    const row = { gpu_type: "A100", fragmentation: [{ free_gpus: 0, nodes: 2 }, { free_gpus: 4, nodes: 1 }, { free_gpus: 8, nodes: 1 }] } as never;
    expect(localStartCheck(2, 4, row, 16, false)).toBeNull(); // 4 + (8 = two blocks of 4)
    expect(localStartCheck(2, 8, row, 16, false)).toBe("needs 2 x 8 A100 on free nodes; largest free block is 8");
    expect(localStartCheck(2, 4, row, 6, false)).toBe("needs 8 A100 GPUs; the VC has 6 free in its quota");
    expect(localStartCheck(2, 4, row, 6, true)).toBeNull(); // preemptible work may borrow
  });
});
