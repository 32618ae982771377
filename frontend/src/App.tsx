import { useCallback, useEffect, useState } from "react";
import { NavLink, Navigate, Route, Routes, useLocation, useNavigate } from "react-router";
import type { Session } from "./api";
import { SessionContext, useMe, useSession } from "./auth";
import { ErrorBox, Loading, TenancyNotice } from "./components/common";
import { getSession, logOut, useVcs } from "./endpoints";
import { AllowedIpsPage } from "./pages/AllowedIps";
import { ClusterPage } from "./pages/Cluster";
import { JobDetailPage } from "./pages/JobDetail";
import { JobsPage } from "./pages/Jobs";
import { LoginPage } from "./pages/Login";
import { QuotasPage } from "./pages/Quotas";
import { RepairsPage } from "./pages/Repairs";
import { SshKeysPage } from "./pages/SshKeys";
import { StoragePage } from "./pages/Storage";
import { SubmitPage } from "./pages/Submit";
import { UsagePage } from "./pages/Usage";
import { VcPage } from "./pages/Vc";

export function App() {
  // The session as the server last said it, with `me` cleared on signing out.
  const [session, setSession] = useState<Session | null>(null);
  const [checked, setChecked] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const navigate = useNavigate();

  const load = useCallback(() => {
    getSession()
      .then((answer) => {
        setSession(answer);
        setError(null);
      })
      .catch((reason) => {
        setError(reason);
        setSession((current) => current && { ...current, me: null });
      })
      .finally(() => setChecked(true));
  }, []);
  useEffect(load, [load]);

  const signOut = useCallback(() => {
    logOut().finally(() => {
      setSession((current) => current && { ...current, me: null });
      navigate("/login");
    });
  }, [navigate]);

  if (!checked) return <Loading what="Trainyard" />;
  if (error && !session?.me) return <ErrorBox error={error} retry={load} />;
  if (!session?.me) {
    return (
      <Routes>
        <Route path="/login" element={<LoginPage onSignedIn={(signedIn) => { setSession((current) => current && { ...current, me: signedIn }); load(); }} />} />
        <Route path="*" element={<RedirectToLogin />} />
      </Routes>
    );
  }
  return (
    <SessionContext.Provider value={{ ...session, me: session.me, signOut }}>
      <Layout>
        <Routes>
          <Route path="/" element={<Navigate to="/jobs" replace />} />
          <Route path="/login" element={<AfterLogin />} />
          <Route path="/submit" element={<SubmitPage />} />
          <Route path="/jobs" element={<JobsPage />} />
          <Route path="/jobs/:id" element={<JobDetailPage />} />
          <Route path="/cluster" element={<ClusterPage />} />
          <Route path="/vcs/:name" element={<VcPage tab="overview" />} />
          <Route path="/vcs/:name/settings" element={<VcPage tab="settings" />} />
          <Route path="/quotas" element={<QuotasPage />} />
          <Route path="/storage" element={<StoragePage />} />
          <Route path="/usage" element={<UsagePage />} />
          <Route path="/repairs" element={<RepairsPage />} />
          <Route path="/me/ssh-keys" element={<SshKeysPage />} />
          <Route path="/me/allowed-ips" element={<AllowedIpsPage />} />
          <Route path="*" element={<NotFound />} />
        </Routes>
      </Layout>
    </SessionContext.Provider>
  );
}

function RedirectToLogin() {
  const location = useLocation();
  const next = location.pathname + location.search;
  return <Navigate to={`/login?next=${encodeURIComponent(next)}`} replace />;
}

function AfterLogin() {
  const next = new URLSearchParams(useLocation().search).get("next");
  return <Navigate to={next && next.startsWith("/") ? next : "/jobs"} replace />;
}

function NotFound() {
  return (
    <section>
      <h1>Page not found</h1>
      <p>
        There is no page here. Go to <NavLink to="/jobs">your jobs</NavLink>.
      </p>
    </section>
  );
}

function Layout({ children }: { children: React.ReactNode }) {
  const { me, tenancy } = useSession();
  const vcs = useVcs("page_size=100");
  const notices = (vcs.data?.results ?? []).filter((vc) => vc.notification?.trim());
  return (
    <div className="layout">
      <header className="topbar">
        <NavLink to="/jobs" className="brand">
          Trainyard
        </NavLink>
        <nav aria-label="Main">
          <NavLink to="/jobs">Jobs</NavLink>
          <NavLink to="/submit">Submit job</NavLink>
          <NavLink to="/cluster">Cluster</NavLink>
          {me.vcs.map((vc) => (
            <NavLink key={vc.name} to={`/vcs/${vc.name}`}>
              VC {vc.name}
            </NavLink>
          ))}
          <NavLink to="/storage">Storage</NavLink>
          <NavLink to="/usage">Usage</NavLink>
          {me.is_cluster_admin && <NavLink to="/quotas">Quotas</NavLink>}
          {me.is_cluster_admin && <NavLink to="/repairs">Node repair</NavLink>}
          <NavLink to="/me/ssh-keys">My SSH keys</NavLink>
          <NavLink to="/me/allowed-ips">My allowed IPs</NavLink>
        </nav>
        <UserMenu />
      </header>
      <TenancyNotice tenancy={tenancy} />
      {notices.map((vc) => (
        <div key={vc.name} className="notice" role="note" aria-label={`Notification of VC ${vc.name}`}>
          <strong>VC {vc.name}:</strong> {vc.notification}
        </div>
      ))}
      <main>{children}</main>
    </div>
  );
}

function UserMenu() {
  const me = useMe();
  const { signOut } = useSession();
  return (
    <div className="user">
      <span>
        {me.username}
        {me.is_cluster_admin && " (cluster admin)"}
      </span>
      <button type="button" onClick={signOut}>
        Sign out
      </button>
    </div>
  );
}
