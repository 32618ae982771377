import { useState, type FormEvent } from "react";
import { ApiError, type FieldErrors, type Schemas } from "../api";
import { ErrorBox, Field } from "../components/common";
import { DataTable } from "../components/DataTable";
import { addSshKey, removeSshKey, useSshKeys } from "../endpoints";
import { when } from "../format";

type SshKey = Schemas["SshKey"];

export function SshKeysPage() {
  const keys = useSshKeys();
  const [name, setName] = useState("");
  const [publicKey, setPublicKey] = useState("");
  const [errors, setErrors] = useState<FieldErrors>({});
  const [failure, setFailure] = useState<unknown>(null);
  const [added, setAdded] = useState("");

  async function add(event: FormEvent) {
    event.preventDefault();
    setAdded("");
    setFailure(null);
    try {
      const key = await addSshKey({ name, public_key: publicKey });
      setErrors({});
      setName("");
      setPublicKey("");
      setAdded(`Added ${key.name || key.key_type} (${key.fingerprint}).`);
      keys.reload();
    } catch (reason) {
      setErrors(reason instanceof ApiError ? reason.fields : {});
      setFailure(reason);
    }
  }

  async function remove(key: SshKey) {
    if (!window.confirm(`Delete the key ${key.name || key.fingerprint}? Jobs started later will not have it.`)) return;
    try {
      await removeSshKey(key.id);
      keys.reload();
    } catch (reason) {
      setFailure(reason);
    }
  }

  return (
    <section>
      <h1>My SSH keys</h1>
      <p className="hint">These public keys are installed in every job you start, for SSH and VS Code.</p>
      <DataTable
        label="SSH keys"
        what="your keys"
        rows={keys.data ?? []}
        loading={keys.loading && !keys.data}
        error={keys.error}
        retry={keys.reload}
        empty="No SSH key yet: add one below to reach your running jobs."
        columns={
          <>
            <th>Name</th>
            <th>Type</th>
            <th>Fingerprint</th>
            <th>Added</th>
            <th />
          </>
        }
        row={(key) => (
          <tr key={key.id}>
            <td>{key.name}</td>
            <td>
              {key.key_type}
              {key.bits ? ` (${key.bits} bits)` : ""}
            </td>
            <td>
              <code>{key.fingerprint}</code>
            </td>
            <td>{when(key.created_at)}</td>
            <td>
              <button type="button" className="link" onClick={() => remove(key)}>
                Delete
              </button>
            </td>
          </tr>
        )}
      />
      <form onSubmit={add} aria-label="Add an SSH key" noValidate>
        <h2>Add a key</h2>
        <Field label="Name" name="name" errors={errors}>
          <input id="f-name" value={name} onChange={(e) => setName(e.target.value)} placeholder="e.g. laptop" />
        </Field>
        <Field label="Public key" name="public_key" errors={errors} hint="the contents of ~/.ssh/id_ed25519.pub (never the private key)">
          <textarea id="f-public_key" rows={3} value={publicKey} onChange={(e) => setPublicKey(e.target.value)} placeholder="ssh-ed25519 AAAA… you@host" />
        </Field>
        {failure !== null && Object.keys(errors).length === 0 && <ErrorBox error={failure} />}
        {added && (
          <p className="ok" role="status">
            {added}
          </p>
        )}
        <button type="submit" className="primary">
          Add key
        </button>
      </form>
    </section>
  );
}
