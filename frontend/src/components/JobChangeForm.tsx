import { useState, type FormEvent } from "react";
import { ApiError, type FieldErrors, type Job } from "../api";
import { changeJob } from "../endpoints";
import { duration } from "../format";
import { ErrorBox, Field } from "./common";

/** A VC admin's change of a submitted job: its priority, wall time (minutes, within the
 * VC's limit) and retries; the server records each change in the job's history. */
export function JobChangeForm({ job, onChanged }: { job: Job; onChanged: () => void }) {
  const [values, setValues] = useState({
    priority: String(job.priority),
    wall_minutes: String(Math.round(job.max_wall_time / 60)),
    max_retries: String(job.max_retries),
  });
  const [errors, setErrors] = useState<FieldErrors>({});
  const [failure, setFailure] = useState<unknown>(null);
  const [saved, setSaved] = useState("");

  async function save(event: FormEvent) {
    event.preventDefault();
    setSaved("");
    setFailure(null);
    try {
      const changed = await changeJob(job.id, {
        priority: Number(values.priority),
        max_wall_time: Math.round(Number(values.wall_minutes) * 60),
        max_retries: Number(values.max_retries),
      });
      setErrors({});
      setSaved(`Saved: wall time ${duration(changed.max_wall_time)}, ${changed.max_retries} retries, priority ${changed.priority}.`);
      onChanged();
    } catch (reason) {
      const fields = reason instanceof ApiError ? { ...reason.fields } : {};
      if (fields.max_wall_time) fields.wall_minutes = fields.max_wall_time;
      setErrors(fields);
      setFailure(Object.keys(fields).length ? null : reason);
    }
  }

  const set = (key: keyof typeof values) => (e: { target: { value: string } }) => {
    const value = e.target.value;
    setValues((current) => ({ ...current, [key]: value }));
  };
  return (
    <form className="row" onSubmit={save} aria-label="Change the job">
      <Field label="Priority" name="priority" errors={errors}>
        <input id="f-priority" type="number" min={-100} max={100} value={values.priority} onChange={set("priority")} />
      </Field>
      <Field label="Wall time (minutes)" name="wall_minutes" errors={errors} hint="at most the VC's limit">
        <input id="f-wall_minutes" type="number" min={1} value={values.wall_minutes} onChange={set("wall_minutes")} />
      </Field>
      <Field label="Retries" name="max_retries" errors={errors}>
        <input id="f-max_retries" type="number" min={0} max={20} value={values.max_retries} onChange={set("max_retries")} />
      </Field>
      <button type="submit">Change</button>
      {saved && <p className="ok" role="status">{saved}</p>}
      <ErrorBox error={failure} />
    </form>
  );
}
