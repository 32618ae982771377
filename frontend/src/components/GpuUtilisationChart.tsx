/** A job's GPU utilisation over time, one line per GPU (SVG, no library). */
import type { GpuUtilisation } from "../api";

const COLOURS = ["#2563eb", "#16a34a", "#d97706", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#65a30d"];

function clock(seconds: number): string {
  return new Date(seconds * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

export function GpuUtilisationChart({ metrics }: { metrics: GpuUtilisation }) {
  const width = 560;
  const height = 140;
  const left = 34;
  const times = metrics.series.flatMap((series) => series.points.map(([at]) => at));
  const first = Math.min(...times);
  const last = Math.max(...times);
  const span = Math.max(last - first, 1);
  const x = (at: number) => left + ((at - first) / span) * (width - left - 8);
  const y = (value: number) => 8 + (1 - Math.min(Math.max(value, 0), 100) / 100) * height;
  const label =
    `GPU utilisation of ${metrics.series.length} GPU(s), mean ${metrics.mean ?? 0} %, ` +
    `from ${clock(first)} to ${clock(last)}`;
  return (
    <figure className="chart gpu-utilisation">
      <svg viewBox={`0 0 ${width} ${height + 36}`} role="img" aria-label={label}>
        {[0, 50, 100].map((tick) => (
          <g key={tick}>
            <line x1={left} x2={width - 8} y1={y(tick)} y2={y(tick)} className="grid" />
            <text x={left - 4} y={y(tick) + 4} textAnchor="end" className="axis">
              {tick}%
            </text>
          </g>
        ))}
        {metrics.series.map((series, index) => (
          <polyline
            key={`${series.attempt}-${series.node}-${series.gpu}`}
            fill="none"
            stroke={COLOURS[index % COLOURS.length]}
            strokeWidth={1.5}
            points={series.points.map(([at, value]) => `${x(at)},${y(value)}`).join(" ")}
          >
            <title>{`attempt ${series.attempt}, ${series.node} GPU ${series.gpu}`}</title>
          </polyline>
        ))}
        <text x={left} y={height + 28} className="axis">
          {clock(first)}
        </text>
        <text x={width - 8} y={height + 28} textAnchor="end" className="axis">
          {clock(last)}
        </text>
      </svg>
      <figcaption>
        GPU utilisation, mean {metrics.mean ?? 0} %:{" "}
        {metrics.series.map((series, index) => (
          <span key={`${series.attempt}-${series.node}-${series.gpu}`} className="legend">
            <span className="swatch" style={{ background: COLOURS[index % COLOURS.length] }} />
            {series.node} GPU {series.gpu}
            {metrics.series.some((other) => other.attempt !== series.attempt) && ` (attempt ${series.attempt})`}
          </span>
        ))}
      </figcaption>
    </figure>
  );
}
