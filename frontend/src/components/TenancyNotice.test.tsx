import { render, screen } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { TenancyNotice } from "./common";

describe("the tenancy notice", () => {
  it("says plainly on every page that jobs are not isolated in single-user mode", () => {
    render(<TenancyNotice tenancy={{ mode: "single-user", message: "Single-user mode: every job runs as mia." }} />);
    expect(screen.getByRole("note", { name: "Single-user mode" })).toHaveTextContent("every job runs as mia");
  });

  it("shows nothing where jobs run as their owners", () => {
    const { container } = render(<TenancyNotice tenancy={{ mode: "multi-tenant", message: "Every job runs as its owner." }} />);
    expect(container).toBeEmptyDOMElement();
  });
});
