/** The Node entry: everything of the browser entry plus the crash-safe file store. */
export * from "./index.js";
export { FileStore } from "./filestore.js";
