import { useEffect, useRef, useState } from "react";
import { ApiError } from "../api";
import { getLogTail } from "../endpoints";

/** One worker's log, followed live until the job has ended and all of it was read. */
export function LogViewer({ jobId, workers }: { jobId: string; workers: number }) {
  const [worker, setWorker] = useState(0);
  const [text, setText] = useState("");
  const [complete, setComplete] = useState(false);
  const [error, setError] = useState("");
  const [follow, setFollow] = useState(true);
  const box = useRef<HTMLPreElement>(null);

  useEffect(() => {
    let offset: number | null = null;
    let stopped = false;
    let timer = 0;
    setText("");
    setComplete(false);
    setError("");
    async function poll() {
      try {
        const query = offset === null ? "" : `&offset=${offset}`;
        const tail = await getLogTail(jobId, `worker=${worker}${query}`);
        if (stopped) return;
        offset = tail.next_offset;
        if (tail.text) setText((previous) => (previous + tail.text).slice(-1_000_000));
        setError("");
        if (tail.complete) {
          setComplete(true);
          return;
        }
      } catch (reason) {
        if (stopped) return;
        if (reason instanceof ApiError && reason.status === 404) setError("No log yet: the job has not started.");
        else setError(reason instanceof Error ? reason.message : String(reason));
      }
      timer = window.setTimeout(poll, 1000);
    }
    poll();
    return () => {
      stopped = true;
      window.clearTimeout(timer);
    };
  }, [jobId, worker]);

  useEffect(() => {
    if (follow && box.current) box.current.scrollTop = box.current.scrollHeight;
  }, [text, follow]);

  return (
    <div className="log">
      <div className="log-bar">
        {workers > 1 && (
          <label>
            Worker{" "}
            <select value={worker} onChange={(e) => setWorker(Number(e.target.value))}>
              {Array.from({ length: workers }, (_, rank) => (
                <option key={rank} value={rank}>
                  {rank}
                </option>
              ))}
            </select>
          </label>
        )}
        <label>
          <input type="checkbox" checked={follow} onChange={(e) => setFollow(e.target.checked)} /> Follow
        </label>
        <span className="hint">{complete ? "complete" : "live"}</span>
        <a className="button" href={`/api/v1/jobs/${jobId}/log/`} download={`${jobId}.log`}>
          Download full log
        </a>
      </div>
      {error && <p className="hint">{error}</p>}
      <pre ref={box} aria-label="Log" tabIndex={0}>
        {text || (complete ? "(empty log)" : "Waiting for output…")}
      </pre>
    </div>
  );
}
