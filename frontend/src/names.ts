// Kernel names as the page shows them. A demangled C++ name runs to hundreds of characters of
// template arguments; the server sends the CLI's shortening beside it (server/names.py:
// ``short_name`` on kernel rows and roofline points, ``short_names`` with the summary for the
// kernels a phase or a finding names). One shortening, in Python: this module only looks it up.
// The full name stays in titles, the kernel's details and the search.

let summaryNames: Record<string, string> = {};

/** The short names of the summary being shown (its phases' and findings' kernels). */
export function setShortNames(m: Record<string, string> | null | undefined): void {
  summaryNames = m || {};
}

/** The name to print for a kernel: the row's own ``short_name``, else the summary's, else the name. */
export function shortName(name: string, short?: string | null): string {
  return short || summaryNames[name] || name;
}
