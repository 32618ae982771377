import { useState, type FormEvent } from "react";
import { ApiError, type FieldErrors, type RequestSchemas, type Schemas } from "../api";
import { ErrorBox, Field } from "../components/common";
import { DataTable } from "../components/DataTable";
import { addAllowedIp, removeAllowedIp, useAllowedIps } from "../endpoints";
import { when } from "../format";

type AllowedIp = Schemas["AllowedIp"];

export function AllowedIpsPage() {
  const ips = useAllowedIps();
  const [address, setAddress] = useState("");
  const [description, setDescription] = useState("");
  const [expires, setExpires] = useState("");
  const [errors, setErrors] = useState<FieldErrors>({});
  const [failure, setFailure] = useState<unknown>(null);
  const [added, setAdded] = useState("");

  async function add(event: FormEvent) {
    event.preventDefault();
    setAdded("");
    setFailure(null);
    const body: RequestSchemas["AllowedIpRequest"] = { address, description };
    if (expires) body.expires_at = new Date(expires).toISOString();
    try {
      const ip = await addAllowedIp(body);
      setErrors({});
      setAddress("");
      setDescription("");
      setExpires("");
      setAdded(`Added ${ip.network}.`);
      ips.reload();
    } catch (reason) {
      setErrors(reason instanceof ApiError ? reason.fields : {});
      setFailure(reason);
    }
  }

  async function remove(ip: AllowedIp) {
    if (!window.confirm(`Delete ${ip.network}? Connections from it will be refused.`)) return;
    try {
      await removeAllowedIp(ip.id);
      ips.reload();
    } catch (reason) {
      setFailure(reason);
    }
  }

  return (
    <section>
      <h1>My allowed IPs</h1>
      <p className="hint">Your jobs' SSH and web endpoints accept connections only from these networks.</p>
      <DataTable
        label="Allowed IPs"
        what="your allowed IPs"
        rows={ips.data ?? []}
        loading={ips.loading && !ips.data}
        error={ips.error}
        retry={ips.reload}
        empty="No allowed IP yet: add the address you connect from."
        columns={
          <>
            <th>Network</th>
            <th>Description</th>
            <th>Added</th>
            <th>Expires</th>
            <th />
          </>
        }
        row={(ip) => (
          <tr key={ip.id} className={ip.expired ? "expired" : ""}>
            <td>
              <code>{ip.network}</code>
            </td>
            <td>{ip.description}</td>
            <td>{when(ip.created_at)}</td>
            <td>{ip.expires_at ? `${when(ip.expires_at)}${ip.expired ? " (expired)" : ""}` : "never"}</td>
            <td>
              <button type="button" className="link" onClick={() => remove(ip)}>
                Delete
              </button>
            </td>
          </tr>
        )}
      />
      <form onSubmit={add} aria-label="Add an allowed IP" noValidate>
        <h2>Add an address</h2>
        <div className="row">
          <Field label="Address or network" name="address" errors={errors} hint="e.g. 203.0.113.7 or 203.0.113.0/24">
            <input id="f-address" value={address} onChange={(e) => setAddress(e.target.value)} />
          </Field>
          <Field label="Description" name="description" errors={errors}>
            <input id="f-description" value={description} onChange={(e) => setDescription(e.target.value)} placeholder="e.g. office" />
          </Field>
          <Field label="Expires" name="expires_at" errors={errors} hint="empty: the default expiry">
            <input id="f-expires_at" type="datetime-local" value={expires} onChange={(e) => setExpires(e.target.value)} />
          </Field>
        </div>
        {failure !== null && Object.keys(errors).length === 0 && <ErrorBox error={failure} />}
        {added && (
          <p className="ok" role="status">
            {added}
          </p>
        )}
        <button type="submit" className="primary">
          Add address
        </button>
      </form>
    </section>
  );
}
