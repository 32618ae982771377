import { useSearchParams } from "react-router";
import { useMe } from "../auth";
import type { Schemas } from "../api";
import { Empty, ErrorBox, Loading } from "../components/common";
import { useGpuHours } from "../endpoints";

type GpuHoursRow = Schemas["GpuHoursRow"];

const PALETTE = ["#2f6fb3", "#e07b39", "#3a9d5d", "#b8485a", "#7d5ba6", "#c29d2d", "#4aa3b5", "#8c6d46"];

/** This month (or `?month=YYYY-MM`) in UTC: its first instant and the next month's. */
export function monthRange(month: string | null, now: Date = new Date()): { since: string; until: string; label: string } {
  const [year, index] = month && /^\d{4}-\d{2}$/.test(month)
    ? [Number(month.slice(0, 4)), Number(month.slice(5)) - 1]
    : [now.getUTCFullYear(), now.getUTCMonth()];
  const since = new Date(Date.UTC(year, index, 1));
  const until = new Date(Date.UTC(year, index + 1, 1));
  return { since: since.toISOString(), until: until.toISOString(), label: since.toISOString().slice(0, 7) };
}

export function hours(value: number | null): string {
  return value === null ? "—" : value.toLocaleString(undefined, { maximumFractionDigits: 1 });
}

/** GPU-hours (DLTS 1.2 and 1.6): per day by VC (or by user inside a VC), the month's booked
 * vs idle hours per user, and the table with its CSV. Scoped as the API is. */
export function UsagePage() {
  const me = useMe();
  const [params, setParams] = useSearchParams();
  const vc = params.get("vc") ?? "";
  const range = monthRange(params.get("month"));
  const scope = `since=${enc(range.since)}&until=${enc(range.until)}${vc ? `&vc=${enc(vc)}` : ""}`;
  const series = useGpuHours(`group_by=${vc ? "user" : "vc"}&bucket=day&measure=false&${scope}`);
  const perUser = useGpuHours(`group_by=user&${scope}`);
  const choose = (changes: Record<string, string>) => {
    const next = { vc, month: range.label, ...changes };
    setParams(Object.fromEntries(Object.entries(next).filter(([, value]) => value)));
  };
  return (
    <section>
      <div className="heading">
        <h1>GPU usage</h1>
        <label className="inline">
          VC{" "}
          <select value={vc} onChange={(e) => choose({ vc: e.target.value })} aria-label="VC">
            <option value="">{me.is_cluster_admin ? "All VCs" : "All my VCs"}</option>
            {me.vcs.map((one) => (
              <option key={one.name} value={one.name}>
                {one.name}
              </option>
            ))}
          </select>
        </label>
        <label className="inline">
          Month{" "}
          <input type="month" value={range.label} onChange={(e) => choose({ month: e.target.value })} aria-label="Month" />
        </label>
      </div>
      <ErrorBox error={series.error || perUser.error} retry={() => { series.reload(); perUser.reload(); }} />
      {series.loading && !series.data ? (
        <Loading what="GPU-hours" />
      ) : (
        <DailyChart rows={series.data?.results ?? []} month={range.label} by={vc ? "user" : "VC"} />
      )}
      {perUser.data && (
        perUser.data.results.length ? (
          <>
            <BookedVsIdle rows={perUser.data.results} month={range.label} />
            <UsageTable rows={perUser.data.results} />
            <div className="toolbar">
              <a className="button" href={`/api/v1/usage/gpu-hours/export/?group_by=user&${scope}`} download>
                Download CSV
              </a>
            </div>
          </>
        ) : (
          <Empty>No job held GPUs in {range.label}.</Empty>
        )
      )}
    </section>
  );
}

function DailyChart({ rows, month, by }: { rows: GpuHoursRow[]; month: string; by: string }) {
  const days = daysOf(month);
  const keys = [...new Set(rows.map((row) => row.key))].sort();
  const value = new Map(rows.map((row) => [`${row.bucket}|${row.key}`, row.booked_gpu_hours]));
  const totals = days.map((day) => keys.reduce((sum, key) => sum + (value.get(`${day}|${key}`) ?? 0), 0));
  const most = Math.max(1, ...totals);
  const width = 700;
  const height = 160;
  const slot = width / days.length;
  const label = `Booked GPU-hours per day in ${month} by ${by}: ${keys
    .map((key) => `${key} ${hours(rows.filter((row) => row.key === key).reduce((s, r) => s + r.booked_gpu_hours, 0))}`)
    .join(", ") || "none"}`;
  return (
    <figure className="chart gpu-utilisation">
      <svg viewBox={`0 0 ${width} ${height + 20}`} role="img" aria-label={label}>
        {days.map((day, index) => {
          let top = height;
          return (
            <g key={day}>
              {keys.map((key, k) => {
                const booked = value.get(`${day}|${key}`) ?? 0;
                if (!booked) return null;
                const barHeight = (booked / most) * height;
                top -= barHeight;
                return (
                  <rect key={key} x={index * slot + 1} y={top} width={slot - 2} height={barHeight} fill={PALETTE[k % PALETTE.length]}>
                    <title>{`${day} ${key}: ${hours(booked)} GPU-hours`}</title>
                  </rect>
                );
              })}
              {index % 5 === 0 && (
                <text x={index * slot + slot / 2} y={height + 14} textAnchor="middle" className="axis">
                  {day.slice(8)}
                </text>
              )}
            </g>
          );
        })}
      </svg>
      <figcaption>
        Booked GPU-hours per day, by {by}
        {keys.map((key, k) => (
          <span key={key} className="legend">
            <span className="swatch" style={{ background: PALETTE[k % PALETTE.length] }} />
            {key}
          </span>
        ))}
      </figcaption>
    </figure>
  );
}

function BookedVsIdle({ rows, month }: { rows: GpuHoursRow[]; month: string }) {
  const most = Math.max(1, ...rows.map((row) => row.booked_gpu_hours));
  const width = 700;
  const line = 18;
  const top = [...rows].sort((a, b) => b.booked_gpu_hours - a.booked_gpu_hours).slice(0, 20);
  return (
    <figure className="chart gpu-utilisation">
      <svg viewBox={`0 0 ${width} ${top.length * line + 4}`} role="img" aria-label={`Booked and idle GPU-hours per user in ${month}`}>
        {top.map((row, index) => {
          const room = width - 120 - 190; // names on the left, the figures on the right
          const booked = (row.booked_gpu_hours / most) * room;
          const idle = row.idle_gpu_hours === null ? 0 : (row.idle_gpu_hours / most) * room;
          return (
            <g key={row.key}>
              <text x={0} y={index * line + 13} className="value">
                {row.key}
              </text>
              <rect x={120} y={index * line + 2} width={booked} height={line - 4} fill={PALETTE[0]}>
                <title>{`${row.key}: ${hours(row.booked_gpu_hours)} booked`}</title>
              </rect>
              <rect x={120 + booked - idle} y={index * line + 2} width={idle} height={line - 4} fill={PALETTE[1]}>
                <title>{`${row.key}: ${hours(row.idle_gpu_hours)} idle`}</title>
              </rect>
              <text x={126 + booked} y={index * line + 13} className="axis">
                {hours(row.booked_gpu_hours)} booked, {hours(row.idle_gpu_hours)} idle
              </text>
            </g>
          );
        })}
      </svg>
      <figcaption>
        The month's GPU-hours per user:
        <span className="legend"><span className="swatch" style={{ background: PALETTE[0] }} />booked</span>
        <span className="legend"><span className="swatch" style={{ background: PALETTE[1] }} />of which idle</span>
      </figcaption>
    </figure>
  );
}

function UsageTable({ rows }: { rows: GpuHoursRow[] }) {
  const unknown = rows.find((row) => row.used_gpu_hours === null)?.used_unavailable_reason;
  return (
    <>
      <table aria-label="GPU-hours per user">
        <thead>
          <tr>
            <th>User</th>
            <th>Booked</th>
            <th>Used</th>
            <th>Idle</th>
            <th>Borrowed</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((row) => (
            <tr key={row.key}>
              <td>{row.key}</td>
              <td>{hours(row.booked_gpu_hours)}</td>
              <td>{hours(row.used_gpu_hours)}</td>
              <td>{hours(row.idle_gpu_hours)}</td>
              <td>{hours(row.borrowed_gpu_hours)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {unknown && <p className="muted">Used and idle hours are unknown where shown “—”: {unknown}.</p>}
    </>
  );
}

function daysOf(month: string): string[] {
  const { since, until } = monthRange(month);
  const days = [];
  for (let day = new Date(since); day < new Date(until); day = new Date(day.getTime() + 86400000)) {
    days.push(day.toISOString().slice(0, 10));
  }
  return days;
}

function enc(value: string): string {
  return encodeURIComponent(value);
}
