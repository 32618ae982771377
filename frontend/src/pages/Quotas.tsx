import { useEffect, useState } from "react";
import { useMe } from "../auth";
import { ErrorBox, Loading } from "../components/common";
import { setVcQuotas, useGpuTypes, useVcQuotas, useVcs } from "../endpoints";

/** Cluster admins set each VC's GPUs per GPU type (CPUs and memory follow the t-shirt size). */
export function QuotasPage() {
  const me = useMe();
  const vcs = useVcs(me.is_cluster_admin ? "page_size=500" : null);
  const types = useGpuTypes(me.is_cluster_admin);
  if (!me.is_cluster_admin) {
    return (
      <section>
        <h1>Quotas</h1>
        <div className="error" role="alert">
          Only cluster admins can see and set quotas. Your VC's quota is on its VC page.
        </div>
      </section>
    );
  }
  const typeNames = (types.data ?? []).map((t) => t.name);
  return (
    <section>
      <h1>Quotas</h1>
      <p className="hint">GPUs per VC and GPU type. Saving a row replaces that VC's quotas.</p>
      <ErrorBox error={vcs.error || types.error} />
      {(vcs.loading || types.loading) && !vcs.data ? (
        <Loading what="quotas" />
      ) : (
        <div className="table-wrap">
          <table aria-label="Quotas">
            <thead>
              <tr>
                <th>VC</th>
                {typeNames.map((name) => (
                  <th key={name}>{name} GPUs</th>
                ))}
                <th />
              </tr>
            </thead>
            <tbody>
              {(vcs.data?.results ?? []).map((vc) => (
                <QuotaRow key={vc.name} vc={vc.name} typeNames={typeNames} />
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

function QuotaRow({ vc, typeNames }: { vc: string; typeNames: string[] }) {
  const quotas = useVcQuotas(vc);
  const [values, setValues] = useState<Record<string, string>>({});
  const [message, setMessage] = useState("");
  const [failure, setFailure] = useState<unknown>(null);
  useEffect(() => {
    if (quotas.data) setValues(Object.fromEntries(quotas.data.map((q) => [q.gpu_type, String(q.gpus)])));
  }, [quotas.data]);

  async function save() {
    setMessage("");
    setFailure(null);
    const body = Object.entries(values)
      .filter(([, gpus]) => gpus.trim() !== "")
      .map(([gpu_type, gpus]) => ({ gpu_type, gpus: Number(gpus) }));
    try {
      await setVcQuotas(vc, body);
      setMessage("Saved.");
      quotas.reload();
    } catch (reason) {
      setFailure(reason);
    }
  }

  return (
    <tr>
      <th scope="row">{vc}</th>
      {typeNames.map((name) => (
        <td key={name}>
          <input
            type="number"
            min={0}
            aria-label={`${vc} ${name} GPUs`}
            value={values[name] ?? ""}
            placeholder="none"
            onChange={(e) => {
              const value = e.target.value;
              setValues((current) => ({ ...current, [name]: value }));
            }}
          />
        </td>
      ))}
      <td>
        <button type="button" onClick={save}>
          Save {vc}
        </button>{" "}
        {message && <span className="ok">{message}</span>}
        <ErrorBox error={failure} />
      </td>
    </tr>
  );
}
