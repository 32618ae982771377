import { createContext, useContext } from "react";
import type { Me, Session } from "./api";

/** The session as the signed-in pages read it: the API's Session (who is signed in, how
 * tenants are kept apart), its user known, and how to end it. */
export type SignedInSession = Session & { me: Me; signOut: () => void };

export const SessionContext = createContext<SignedInSession | null>(null);

export function useSession(): SignedInSession {
  const session = useContext(SessionContext);
  if (!session) throw new Error("useSession outside a signed-in page");
  return session;
}

export function useMe(): Me {
  return useSession().me;
}

export function isVcAdmin(me: Me, vc: string): boolean {
  return me.is_cluster_admin || me.vcs.some((m) => m.name === vc && m.role === "admin");
}
