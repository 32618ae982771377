import { createContext, useContext } from "react";
import type { Me } from "./api";

export interface Session {
  me: Me;
  signOut: () => void;
}

export const SessionContext = createContext<Session | null>(null);

export function useSession(): Session {
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
