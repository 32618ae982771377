import { ErrorBox, Loading } from "../components/common";
import { DataTable } from "../components/DataTable";
import { useClusterSummary, useNodes, useVcUsage } from "../endpoints";
import { FragmentationChart } from "../components/FragmentationChart";
import { memory, when } from "../format";

export function ClusterPage() {
  const summary = useClusterSummary(15000);
  const nodes = useNodes("page_size=500&ordering=name", 30000);
  const usage = useVcUsage(30000);
  const rows = summary.data?.gpu_types ?? [];
  return (
    <section>
      <h1>Cluster status</h1>
      {summary.data?.tenancy && (
        <p className={`tenancy ${summary.data.tenancy.mode}`} aria-label="Tenant isolation">
          <strong>{summary.data.tenancy.mode === "single-user" ? "Single-user mode" : "Multi-tenant"}:</strong>{" "}
          {summary.data.tenancy.message}
        </p>
      )}
      <DataTable
        label="GPU types"
        what="the cluster"
        rows={rows}
        loading={summary.loading && !summary.data}
        error={summary.error}
        retry={summary.reload}
        empty="No worker nodes are registered yet. A cluster admin adds them with the nodes API."
        columns={
          <>
            <th>GPU type</th>
            <th>Worker nodes</th>
            <th>Schedulable</th>
            <th>GPUs total</th>
            <th>Used</th>
            <th>Free</th>
            <th>CPUs used / total</th>
            <th>Memory used / total</th>
          </>
        }
        row={(row) => (
          <tr key={row.gpu_type}>
            <td>{row.gpu_type}</td>
            <td>{row.nodes}</td>
            <td>{row.schedulable_nodes}</td>
            <td>{row.gpus_total}</td>
            <td>{row.gpus_used}</td>
            <td>{row.gpus_free}</td>
            <td>
              {Number(row.cpus_used)} / {Number(row.cpus_total)}
            </td>
            <td>
              {memory(row.memory_used)} / {memory(row.memory_total)}
            </td>
          </tr>
        )}
      />
      {rows.length > 0 && (
        <div className="charts">
          {rows
            .filter((row) => row.gpus_total > 0)
            .map((row) => (
              <FragmentationChart key={row.gpu_type} gpuType={row.gpu_type} histogram={row.fragmentation} />
            ))}
        </div>
      )}
      <h2>Per-VC usage</h2>
      {usage.error ? (
        <p className="hint">Per-VC usage is not available from this server.</p>
      ) : usage.loading && !usage.data ? (
        <Loading what="VC usage" />
      ) : (
        <div className="table-wrap">
          <table aria-label="Per-VC usage">
            <thead>
              <tr>
                <th>VC</th>
                <th>GPU type</th>
                <th>Quota</th>
                <th>Used</th>
                <th>Queued</th>
              </tr>
            </thead>
            <tbody>
              {(usage.data?.vcs ?? []).map((row) => (
                <tr key={`${row.vc}/${row.gpu_type}`}>
                  <td>{row.vc}</td>
                  <td>{row.gpu_type}</td>
                  <td>{row.quota_gpus}</td>
                  <td>{row.used_gpus}</td>
                  <td>{row.queued_gpus}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <h2>Nodes</h2>
      <ErrorBox error={nodes.error} />
      {nodes.data && (
        <div className="table-wrap">
          <table aria-label="Nodes">
            <thead>
              <tr>
                <th>Node</th>
                <th>GPU type</th>
                <th title="Only this VC's jobs run there (and other VCs' preemptible jobs if it lends its nodes)">Dedicated to</th>
                <th title="The network switch the node hangs under (a gang goes under as few as it can)">Switch</th>
                <th>GPUs free / total</th>
                <th>CPUs</th>
                <th>Memory</th>
                <th>Schedulable</th>
                <th>Repair state</th>
                <th>Ready</th>
                <th>Last heartbeat</th>
              </tr>
            </thead>
            <tbody>
              {nodes.data.results.map((node) => (
                <tr key={node.name}>
                  <td>{node.name}</td>
                  <td>{node.gpu_type}</td>
                  <td>{node.dedicated_vc ? `VC ${node.dedicated_vc}` : "shared"}</td>
                  <td>{node.switch || "-"}</td>
                  <td>
                    {node.gpus_free ?? "?"} / {node.gpus}
                  </td>
                  <td>{Number(node.cpus)}</td>
                  <td>{memory(Number(node.memory))}</td>
                  <td>{node.schedulable ? "yes" : "cordoned"}</td>
                  <td>{node.repair_state.replaceAll("_", " ")}</td>
                  <td title={node.ready_reason}>{node.ready ? "ready" : `not ready${node.ready_reason ? `: ${node.ready_reason}` : ""}`}</td>
                  <td>{when(node.last_heartbeat)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
