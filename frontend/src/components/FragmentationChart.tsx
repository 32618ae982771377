import type { Fragment } from "../api";

/** A bar chart of how many schedulable nodes have k free GPUs (SVG, no library). */
export function FragmentationChart({ gpuType, histogram }: { gpuType: string; histogram: Fragment[] }) {
  const width = 280;
  const height = 120;
  const bars = histogram.length ? histogram : [{ free_gpus: 0, nodes: 0 }];
  const most = Math.max(1, ...bars.map((bar) => bar.nodes));
  const slot = width / bars.length;
  const label = `${gpuType} nodes by free GPUs: ${bars
    .map((bar) => `${bar.nodes} with ${bar.free_gpus} free`)
    .join(", ")}`;
  return (
    <figure className="chart">
      <svg viewBox={`0 0 ${width} ${height + 32}`} role="img" aria-label={label}>
        {bars.map((bar, index) => {
          const barHeight = (bar.nodes / most) * height;
          const x = index * slot + slot * 0.15;
          return (
            <g key={bar.free_gpus}>
              <rect
                x={x}
                y={height - barHeight}
                width={slot * 0.7}
                height={barHeight}
                className="bar"
              >
                <title>{`${bar.nodes} node(s) with ${bar.free_gpus} free GPU(s)`}</title>
              </rect>
              {bar.nodes > 0 && (
                <text x={x + slot * 0.35} y={height - barHeight - 3} textAnchor="middle" className="value">
                  {bar.nodes}
                </text>
              )}
              <text x={x + slot * 0.35} y={height + 14} textAnchor="middle" className="axis">
                {bar.free_gpus}
              </text>
            </g>
          );
        })}
        <text x={width / 2} y={height + 30} textAnchor="middle" className="axis">
          free GPUs per node
        </text>
      </svg>
      <figcaption>{gpuType}: nodes by free GPUs</figcaption>
    </figure>
  );
}
