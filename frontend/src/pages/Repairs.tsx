import { useState } from "react";
import { ApiError, type FieldErrors, type NodeFault as Fault, type NodeRepair as RepairNode, type Schemas } from "../api";

// One of next_states, which the schema gives as plain strings.
type RepairState = Schemas["RepairStateEnum"];
import { useMe } from "../auth";
import { ErrorBox, Loading } from "../components/common";
import { moveNode, useNodeFaults, useNodeRepair, useNodeRepairs } from "../endpoints";
import { when } from "../format";

const STATES = ["in_service", "out_of_pool", "ready_for_repair", "in_repair", "after_repair"];
const STATE_BADGE: Record<string, string> = {
  in_service: "green",
  out_of_pool: "red",
  ready_for_repair: "amber",
  in_repair: "amber",
  after_repair: "blue",
};

function words(state: string): string {
  return state.replaceAll("_", " ");
}

/** The repair manager at work, for cluster admins: every node's place in the repair cycle,
 * its open faults and history, what the safety valve holds back, and moves by hand. */
export function RepairsPage() {
  const me = useMe();
  const nodes = useNodeRepairs(me.is_cluster_admin ? "page_size=1000" : null, 10000);
  const faults = useNodeFaults(me.is_cluster_admin ? "open=true&page_size=500" : null, 10000);
  const [shown, setShown] = useState<string | null>(null);
  if (!me.is_cluster_admin) {
    return (
      <section>
        <h1>Node repair</h1>
        <div className="error" role="alert">
          Only cluster admins see the repair state of nodes.
        </div>
      </section>
    );
  }
  const rows = nodes.data?.results ?? [];
  const open = faults.data?.results ?? [];
  const heldBack = open.filter((fault) => fault.held_back);
  const cluster = open.filter((fault) => fault.node === null);
  const counts = STATES.map((state) => [state, rows.filter((node) => node.repair_state === state).length] as const);
  const refresh = () => {
    nodes.reload();
    faults.reload();
  };
  return (
    <section>
      <h1>Node repair</h1>
      <ErrorBox error={nodes.error || faults.error} retry={refresh} />
      {cluster.map((fault) => (
        <div key={fault.id} className="error" role="alert">
          <strong>{fault.fault}</strong> since {when(fault.first_seen)}: {fault.detail}. {fault.outcome}.
        </div>
      ))}
      {nodes.loading && !nodes.data ? (
        <Loading what="the nodes' repair state" />
      ) : (
        <>
          <p aria-label="Nodes by repair state" className="state-counts">
            {rows.length} nodes:{" "}
            {counts
              .filter(([, count]) => count > 0)
              .map(([state, count]) => `${count} ${words(state)}`)
              .join(", ")}
          </p>
          <h2>Held back by the safety valve</h2>
          {heldBack.length === 0 ? (
            <p className="hint">No fault is held back: every node a rule took out went out.</p>
          ) : (
            <div className="table-wrap">
              <table aria-label="Held back">
                <thead>
                  <tr>
                    <th>Node</th>
                    <th>Fault</th>
                    <th>Since</th>
                    <th>Why it stays in service</th>
                  </tr>
                </thead>
                <tbody>
                  {heldBack.map((fault) => (
                    <tr key={fault.id}>
                      <td>{fault.node}</td>
                      <td>
                        {fault.fault}
                        {fault.detail && ` on ${fault.detail}`}
                      </td>
                      <td>{when(fault.first_seen)}</td>
                      <td>{fault.outcome}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
          <h2>Nodes</h2>
          <div className="table-wrap">
            <table aria-label="Repair state">
              <thead>
                <tr>
                  <th>Node</th>
                  <th>State</th>
                  <th>Ready</th>
                  <th>Open faults</th>
                  <th>Move by hand</th>
                  <th />
                </tr>
              </thead>
              <tbody>
                {rows.map((node) => (
                  <NodeRow
                    key={node.name}
                    node={node}
                    shown={shown === node.name}
                    toggle={() => setShown(shown === node.name ? null : node.name)}
                    moved={refresh}
                  />
                ))}
              </tbody>
            </table>
          </div>
        </>
      )}
    </section>
  );
}

function NodeRow({ node, shown, toggle, moved }: { node: RepairNode; shown: boolean; toggle: () => void; moved: () => void }) {
  const [target, setTarget] = useState(node.next_states[0] ?? "");
  const [reason, setReason] = useState("");
  const [errors, setErrors] = useState<FieldErrors>({});
  const [failure, setFailure] = useState<unknown>(null);
  const [done, setDone] = useState("");
  const [busy, setBusy] = useState(false);
  const chosen = node.next_states.includes(target) ? target : (node.next_states[0] ?? "");
  const moveErrors = errors.to_state ?? errors.reason;

  async function move() {
    setBusy(true);
    setErrors({});
    setFailure(null);
    try {
      const answer = await moveNode(node.name, { to_state: chosen as RepairState, reason });
      setDone(`Moved to ${words(answer.repair_state)}.`);
      setReason("");
      moved();
    } catch (error) {
      if (error instanceof ApiError) setErrors(error.fields);
      setFailure(error);
    } finally {
      setBusy(false);
    }
  }

  return (
    <>
      <tr>
        <td>{node.name}</td>
        <td>
          <span className={`badge badge-${STATE_BADGE[node.repair_state] ?? "grey"}`}>{words(node.repair_state)}</span>
          {!node.schedulable && node.repair_state === "in_service" && <small className="hint"> cordoned</small>}
        </td>
        <td title={node.ready_reason}>{node.ready ? "ready" : `not ready${node.ready_reason ? `: ${node.ready_reason}` : ""}`}</td>
        <td>
          {node.open_faults.length === 0
            ? "—"
            : node.open_faults.map((fault) => (
                <div key={fault.id} className={fault.severity === "critical" ? "failed" : undefined}>
                  <strong>{fault.fault}</strong>
                  {fault.detail && ` on ${fault.detail}`} ({fault.rule}, {fault.severity})
                  {fault.outcome && <div className="hint">{fault.outcome}</div>}
                </div>
              ))}
        </td>
        <td>
          <div className="move">
            <select aria-label={`Move ${node.name} to`} value={chosen} onChange={(e) => setTarget(e.target.value)}>
              {node.next_states.map((state) => (
                <option key={state} value={state}>
                  {words(state)}
                </option>
              ))}
            </select>
            <input aria-label={`Reason for moving ${node.name}`} placeholder="reason" value={reason} onChange={(e) => setReason(e.target.value)} />
            <button type="button" onClick={move} disabled={busy || !chosen}>
              Move
            </button>
          </div>
          {moveErrors && <div className="field-error">{moveErrors.join(" ")}</div>}
          {failure !== null && !moveErrors && <ErrorBox error={failure} />}
          {done && (
            <span className="ok" role="status">
              {done}
            </span>
          )}
        </td>
        <td>
          <button type="button" className="link" aria-expanded={shown} onClick={toggle}>
            {shown ? "Hide history" : "History"}
          </button>
        </td>
      </tr>
      {shown && (
        <tr>
          <td colSpan={6}>
            <History key={node.repair_state} name={node.name} />
          </td>
        </tr>
      )}
    </>
  );
}

function History({ name }: { name: string }) {
  const detail = useNodeRepair(name);
  if (detail.loading && !detail.data) return <Loading what={`the history of ${name}`} />;
  const events = detail.data?.history ?? [];
  return (
    <>
      <ErrorBox error={detail.error} />
      {events.length === 0 ? (
        <p className="hint">{name} has never left service.</p>
      ) : (
        <table aria-label={`History of ${name}`}>
          <thead>
            <tr>
              <th>When</th>
              <th>Move</th>
              <th>Why</th>
              <th>By</th>
            </tr>
          </thead>
          <tbody>
            {events.map((event, index) => (
              <tr key={index}>
                <td>{when(event.created_at)}</td>
                <td>
                  {words(event.from_state)} → {words(event.to_state)}
                </td>
                <td>{event.reason}</td>
                <td>{event.rule ? `rule ${event.rule}` : event.actor}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}
