// Stylesheets are bundled by esbuild into index.css next to index.js.
declare module "*.css";
