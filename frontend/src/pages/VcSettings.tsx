import { useState, type FormEvent } from "react";
import { ApiError, type FieldErrors, type Vc } from "../api";
import { ErrorBox, Field } from "../components/common";
import { removeVcMember, setVcMember, updateVc, useVcMembers } from "../endpoints";
import { duration } from "../format";

/** The settings a VC admin changes, and the VC's members and roles. */
export function VcSettings({ vc, onSaved }: { vc: Vc; onSaved: () => void }) {
  const [values, setValues] = useState({
    policy: vc.policy,
    infeasible_deadlines: vc.infeasible_deadlines ?? "flag",
    max_wall_hours: String(vc.max_wall_time / 3600),
    interactive_wall_hours: String((vc.interactive_wall_time ?? 8 * 3600) / 3600),
    max_interactive_gpus: String(vc.max_interactive_gpus),
    default_max_retries: String(vc.default_max_retries),
    user_gpu_limit: vc.user_gpu_limit === null ? "" : String(vc.user_gpu_limit),
    usage_half_life_hours: String(vc.usage_half_life_hours ?? 168),
    notification: vc.notification,
    idle_util_percent: String(vc.idle_util_percent ?? 5),
    idle_warn_minutes: optional(vc.idle_warn_minutes),
    idle_kill_minutes: String(vc.idle_kill_minutes ?? 60),
    interactive_idle_warn_minutes: optional(vc.interactive_idle_warn_minutes),
    interactive_idle_kill_minutes: String(vc.interactive_idle_kill_minutes ?? 240),
  });
  const [lendsDedicated, setLendsDedicated] = useState(vc.lends_dedicated_nodes ?? false);
  const [wholeNodes, setWholeNodes] = useState(vc.whole_nodes_for_distributed ?? false);
  const [errors, setErrors] = useState<FieldErrors>({});
  const [failure, setFailure] = useState<unknown>(null);
  const [saved, setSaved] = useState("");

  async function save(event: FormEvent) {
    event.preventDefault();
    setSaved("");
    setFailure(null);
    try {
      const body = {
        policy: values.policy,
        infeasible_deadlines: values.infeasible_deadlines,
        max_wall_time: Math.round(Number(values.max_wall_hours) * 3600),
        interactive_wall_time: Math.round(Number(values.interactive_wall_hours) * 3600),
        max_interactive_gpus: Number(values.max_interactive_gpus),
        default_max_retries: Number(values.default_max_retries),
        user_gpu_limit: values.user_gpu_limit.trim() === "" ? null : Number(values.user_gpu_limit),
        usage_half_life_hours: Number(values.usage_half_life_hours),
        notification: values.notification,
        idle_util_percent: Number(values.idle_util_percent),
        idle_warn_minutes: orNull(values.idle_warn_minutes),
        idle_kill_minutes: Number(values.idle_kill_minutes),
        interactive_idle_warn_minutes: orNull(values.interactive_idle_warn_minutes),
        interactive_idle_kill_minutes: Number(values.interactive_idle_kill_minutes),
        lends_dedicated_nodes: lendsDedicated,
        whole_nodes_for_distributed: wholeNodes,
      };
      const updated = await updateVc(vc.name, body);
      setErrors({});
      setSaved(`Saved: policy ${updated.policy}, jobs run at most ${duration(updated.max_wall_time)}.`);
      onSaved();
    } catch (reason) {
      const fields = reason instanceof ApiError ? { ...reason.fields } : {};
      if (fields.max_wall_time) fields.max_wall_hours = fields.max_wall_time;
      if (fields.interactive_wall_time) fields.interactive_wall_hours = fields.interactive_wall_time;
      setErrors(fields);
      setFailure(reason);
    }
  }

  // From the latest state, not this render's: two changes in one tick both stay.
  const set = (key: keyof typeof values) => (e: { target: { value: string } }) => {
    const value = e.target.value;
    setValues((current) => ({ ...current, [key]: value }));
  };

  return (
    <div className="settings">
      <form onSubmit={save} aria-label="VC settings" noValidate>
        <h2>Scheduling</h2>
        <Field label="Scheduling policy" name="policy" errors={errors} hint="BF: in order, smaller jobs run ahead when they do not delay the first waiting one; FIFO: strictly in order; RF: the jobs that fit first; LAS (the default): the jobs that have run least first, then the members who used least (preempts preemptible jobs); FS: the members who used least first">
          <select id="f-policy" value={values.policy} onChange={set("policy")}>
            <option value="BF">BF (backfill)</option>
            <option value="FIFO">FIFO</option>
            <option value="RF">RF</option>
            <option value="LAS">LAS</option>
            <option value="FS">FS (fair share)</option>
          </select>
        </Field>
        <Field label="Infeasible deadlines" name="infeasible_deadlines" errors={errors} hint="a job whose throughput and work say it cannot meet its deadline on the cluster as it is">
          <select id="f-infeasible_deadlines" value={values.infeasible_deadlines} onChange={set("infeasible_deadlines")}>
            <option value="flag">accept and flag</option>
            <option value="best_effort">accept best-effort (its deadline is not favoured)</option>
            <option value="refuse">refuse</option>
          </select>
        </Field>
        <div className="row">
          <Field label="Max job time (hours)" name="max_wall_hours" errors={errors}>
            <input id="f-max_wall_hours" type="number" min={0.02} step="any" value={values.max_wall_hours} onChange={set("max_wall_hours")} />
          </Field>
          <Field label="Interactive job time (hours)" name="interactive_wall_hours" errors={errors} hint="for interactive jobs that give none">
            <input id="f-interactive_wall_hours" type="number" min={0.02} step="any" value={values.interactive_wall_hours} onChange={set("interactive_wall_hours")} />
          </Field>
          <Field label="Max interactive GPUs" name="max_interactive_gpus" errors={errors}>
            <input id="f-max_interactive_gpus" type="number" min={0} value={values.max_interactive_gpus} onChange={set("max_interactive_gpus")} />
          </Field>
          <Field label="Default retries" name="default_max_retries" errors={errors}>
            <input id="f-default_max_retries" type="number" min={0} max={20} value={values.default_max_retries} onChange={set("default_max_retries")} />
          </Field>
          <Field label="GPUs per user before approval" name="user_gpu_limit" errors={errors} hint="empty: no limit">
            <input id="f-user_gpu_limit" type="number" min={0} value={values.user_gpu_limit} onChange={set("user_gpu_limit")} />
          </Field>
          <Field label="Fair-share half-life (hours)" name="usage_half_life_hours" errors={errors} hint="FS: a member's past GPU-time counts half after this long">
            <input id="f-usage_half_life_hours" type="number" min={1} value={values.usage_half_life_hours} onChange={set("usage_half_life_hours")} />
          </Field>
        </div>
        <Field label="Lend the nodes dedicated to this VC" name="lends_dedicated_nodes" errors={errors} hint="other VCs' preemptible jobs may run on them while this VC leaves them idle; its own jobs preempt them">
          <input id="f-lends_dedicated_nodes" type="checkbox" checked={lendsDedicated} onChange={(e) => setLendsDedicated(e.target.checked)} />
        </Field>
        <Field label="Whole nodes for distributed jobs" name="whole_nodes_for_distributed" errors={errors} hint="every job of more than one worker gets nodes of its own, each worker all of one">
          <input id="f-whole_nodes_for_distributed" type="checkbox" checked={wholeNodes} onChange={(e) => setWholeNodes(e.target.checked)} />
        </Field>
        <h2>Idle GPUs</h2>
        <p className="muted">
          A running job whose GPUs all stay under the threshold for the warning time is warned (an insight and an
          email), then killed after the kill time unless they are used. Empty warning time: not watched.
        </p>
        <div className="row">
          <Field label="Idle under (%)" name="idle_util_percent" errors={errors}>
            <input id="f-idle_util_percent" type="number" min={0} max={100} value={values.idle_util_percent} onChange={set("idle_util_percent")} />
          </Field>
          <Field label="Warn after (minutes)" name="idle_warn_minutes" errors={errors} hint="empty: off">
            <input id="f-idle_warn_minutes" type="number" min={1} value={values.idle_warn_minutes} onChange={set("idle_warn_minutes")} />
          </Field>
          <Field label="Kill after the warning (minutes)" name="idle_kill_minutes" errors={errors}>
            <input id="f-idle_kill_minutes" type="number" min={0} value={values.idle_kill_minutes} onChange={set("idle_kill_minutes")} />
          </Field>
          <Field label="Interactive: warn after (minutes)" name="interactive_idle_warn_minutes" errors={errors} hint="empty: off">
            <input id="f-interactive_idle_warn_minutes" type="number" min={1} value={values.interactive_idle_warn_minutes} onChange={set("interactive_idle_warn_minutes")} />
          </Field>
          <Field label="Interactive: kill after (minutes)" name="interactive_idle_kill_minutes" errors={errors}>
            <input id="f-interactive_idle_kill_minutes" type="number" min={0} value={values.interactive_idle_kill_minutes} onChange={set("interactive_idle_kill_minutes")} />
          </Field>
        </div>
        <Field label="Notification (shown to members as a banner)" name="notification" errors={errors}>
          <textarea id="f-notification" rows={2} value={values.notification} onChange={set("notification")} />
        </Field>
        {failure !== null && <ErrorBox error={failure} />}
        {saved && (
          <p className="ok" role="status">
            {saved}
          </p>
        )}
        <button type="submit" className="primary">
          Save settings
        </button>
      </form>
      <Members vc={vc.name} />
    </div>
  );
}

function Members({ vc }: { vc: string }) {
  const members = useVcMembers(vc);
  const [username, setUsername] = useState("");
  const [role, setRole] = useState<"member" | "admin">("member");
  const [errors, setErrors] = useState<FieldErrors>({});
  const [failure, setFailure] = useState<unknown>(null);

  async function change(name: string, newRole: "member" | "admin") {
    setFailure(null);
    try {
      await setVcMember(vc, { username: name, role: newRole });
      setErrors({});
      setUsername("");
      members.reload();
    } catch (reason) {
      setErrors(reason instanceof ApiError ? reason.fields : {});
      setFailure(reason);
    }
  }

  async function remove(name: string) {
    if (!window.confirm(`Remove ${name} from VC ${vc}? Their jobs stay.`)) return;
    try {
      await removeVcMember(vc, name);
      members.reload();
    } catch (reason) {
      setFailure(reason);
    }
  }

  return (
    <div>
      <h2>Members and roles</h2>
      <ErrorBox error={members.error} />
      <table aria-label="Members">
        <thead>
          <tr>
            <th>User</th>
            <th>Email</th>
            <th>Role</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {(members.data ?? []).map((member) => (
            <tr key={member.username}>
              <td>{member.username}</td>
              <td>{member.email}</td>
              <td>
                <select aria-label={`Role of ${member.username}`} value={member.role} onChange={(e) => change(member.username, e.target.value as "member" | "admin")}>
                  <option value="member">member</option>
                  <option value="admin">admin</option>
                </select>
              </td>
              <td>
                <button type="button" className="link" onClick={() => remove(member.username)}>
                  Remove
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <form
        className="inline"
        aria-label="Add a member"
        onSubmit={(e) => {
          e.preventDefault();
          change(username.trim(), role);
        }}
      >
        <Field label="Username" name="username" errors={errors}>
          <input id="f-username" value={username} onChange={(e) => setUsername(e.target.value)} required />
        </Field>
        <Field label="Role" name="role" errors={errors}>
          <select id="f-role" value={role} onChange={(e) => setRole(e.target.value as "member" | "admin")}>
            <option value="member">member</option>
            <option value="admin">admin</option>
          </select>
        </Field>
        <button type="submit">Add member</button>
      </form>
      {failure !== null && Object.keys(errors).length === 0 && <ErrorBox error={failure} />}
    </div>
  );
}

function optional(value: number | null | undefined): string {
  return value === null || value === undefined ? "" : String(value);
}

function orNull(value: string): number | null {
  return value.trim() === "" ? null : Number(value);
}
