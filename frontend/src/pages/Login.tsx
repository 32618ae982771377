import { useState, type FormEvent } from "react";
import { useLocation, useNavigate } from "react-router";
import { ApiError, type FieldErrors, type Me } from "../api";
import { logIn } from "../endpoints";
import { Field } from "../components/common";

export function LoginPage({ onSignedIn }: { onSignedIn: (me: Me) => void }) {
  const [username, setUsername] = useState("");
  const [password, setPassword] = useState("");
  const [error, setError] = useState("");
  const [fields, setFields] = useState<FieldErrors>({});
  const [busy, setBusy] = useState(false);
  const navigate = useNavigate();
  const next = new URLSearchParams(useLocation().search).get("next");

  async function submit(event: FormEvent) {
    event.preventDefault();
    setBusy(true);
    setError("");
    try {
      const me = await logIn({ username, password });
      onSignedIn(me);
      navigate(next && next.startsWith("/") ? next : "/jobs", { replace: true });
    } catch (reason) {
      setError(reason instanceof Error ? reason.message : String(reason));
      setFields(reason instanceof ApiError ? reason.fields : {});
    } finally {
      setBusy(false);
    }
  }

  return (
    <main className="login">
      <h1>Trainyard</h1>
      <p className="lead">Deep-learning training on shared GPU clusters.</p>
      <form onSubmit={submit} aria-label="Sign in">
        <Field label="Username" name="username" errors={fields}>
          <input id="f-username" autoComplete="username" value={username} onChange={(e) => setUsername(e.target.value)} required autoFocus />
        </Field>
        <Field label="Password" name="password" errors={fields}>
          <input id="f-password" type="password" autoComplete="current-password" value={password} onChange={(e) => setPassword(e.target.value)} required />
        </Field>
        {error && (
          <div className="error" role="alert">
            {error}
          </div>
        )}
        <button type="submit" className="primary" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
      <p className="hint">
        Scripts use the same API with a token: see <a href="/api/docs/">the API reference</a>.
      </p>
    </main>
  );
}
