// Dark mode: follow TensorBoard's. TensorBoard toggles the class "dark-mode" on its own <body>
// (its dark-mode-supporter component, driven by the toggle in its header and by the browser's
// preference); the plugin's iframe is same-origin, so it can read that class and watch it.
// Outside TensorBoard (or if the parent cannot be read) the browser's prefers-color-scheme rules.

function parentBody(): HTMLElement | null {
  try {
    if (window.parent && window.parent !== window) return window.parent.document.body;
  } catch {
    /* cross-origin parent: not TensorBoard's page */
  }
  return null;
}

export function followDarkMode(target: HTMLElement): void {
  const body = parentBody();
  const media = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  const apply = () => {
    const dark = body ? body.classList.contains("dark-mode") : !!media?.matches;
    target.classList.toggle("tba-dark", dark);
    document.documentElement.style.colorScheme = dark ? "dark" : "light";
  };
  apply();
  if (body) {
    new MutationObserver(apply).observe(body, { attributes: true, attributeFilter: ["class"] });
  } else if (media) {
    media.addEventListener("change", apply);
  }
}
