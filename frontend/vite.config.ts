/// <reference types="vitest/config" />
import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// Django serves the build: index.html for `/` and the client routes, assets as static files.
// In development, `npm run dev` serves the app and proxies the API to Django (make run).
const django = process.env.TRAINYARD_DEV_BACKEND ?? "http://127.0.0.1:8000";

export default defineConfig(({ command }) => ({
  base: command === "build" ? "/static/dashboard/" : "/",
  plugins: [react()],
  build: { outDir: "dist", emptyOutDir: true, sourcemap: false },
  server: {
    port: 5173,
    proxy: {
      "/api": django,
      "/admin": django,
      "/static/admin": django,
      "/static/rest_framework": django,
      "/healthz": django,
    },
  },
  test: {
    environment: "jsdom",
    setupFiles: ["./src/test-setup.ts"],
    include: ["src/**/*.test.{ts,tsx}"],
    // A test that types into a whole form takes a few seconds of jsdom on two loaded
    // cores (the suite runs beside pytest in CI); 5 s timed out there, not in the code.
    testTimeout: 30_000,
  },
}));
