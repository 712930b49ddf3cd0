// Validates Kubernetes objects against the Kubernetes API's OpenAPI schemas,
// offline: the validators of the npm package kubernetes-models (compiled
// with ajv from the Kubernetes API's OpenAPI document; a devDependency in
// package.json). Used by kubernetes_schema_test.py.
//
// Usage: node kubernetes_schema_validate.mjs REPO_ROOT < objects.json
//   stdin:  [{"where": "...", "object": {...}}, ...]
//   stdout: {"schemas": "kubernetes-models@X.Y.Z",
//            "results": [{"where": "...", "errors": ["/spec/...: ...", ...]}]}
// Exit 0 when every object could be checked (errors or not), 2 when the
// validators cannot be loaded.
//
// An object fails on what the schema says: a missing required field, a
// wrong type (a string where an integer belongs), a value outside an enum,
// a malformed quantity or format, and a field the schema does not have.
// The API's OpenAPI document does not mark objects closed
// (additionalProperties: false), so the generated validators accept unknown
// fields; the API server (with kubectl's default --validate=strict) refuses
// them. Unknown fields are therefore found by asking the same validator
// about each field: its value is replaced by a value no schema type
// accepts, and a field the schema knows then draws an error at its own
// path (type, enum, format or a nested required), one it does not know
// draws none. Map-valued fields (labels, data, resources.requests) have
// typed values, so their arbitrary keys are known to the schema too.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const root = process.argv[2];
if (!root) {
  console.error("usage: node kubernetes_schema_validate.mjs REPO_ROOT < objects.json");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(root), "package.json"));

let version;
try {
  version = require("kubernetes-models/package.json").version;
} catch (e) {
  console.error(`cannot load kubernetes-models from ${root}/node_modules (npm ci): ${e.message}`);
  process.exit(2);
}

// "apps/v1" -> the module kubernetes-models/apps/v1; "v1" -> kubernetes-models/v1.
function modelOf(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string" ||
      !/^([a-z0-9]([a-z0-9.-]*[a-z0-9])?\/)?v[0-9]+((alpha|beta)[0-9]+)?$/.test(apiVersion) ||
      !/^[A-Z][A-Za-z0-9]*$/.test(kind)) {
    return null;
  }
  let module;
  try {
    module = require(`kubernetes-models/${apiVersion}`);
  } catch {
    return null;
  }
  const model = module[kind];
  return model && model.apiVersion === apiVersion && model.kind === kind ? model : null;
}

// The schema's errors for `object` ([] when valid), each with instancePath.
function schemaErrors(model, object) {
  try {
    new model(object).validate();
    return [];
  } catch (e) {
    if (!Array.isArray(e.errors)) throw e;
    return e.errors;
  }
}

// JSON Pointer escaping, as ajv writes instancePath.
const escape = (key) => key.replace(/~/g, "~0").replace(/\//g, "~1");
const NO_TYPE = Symbol("no schema type accepts this");

// Paths of fields the schema does not know, under `node` at `pointer`.
function unknownFields(model, rootObject, node, pointer, out) {
  if (Array.isArray(node)) {
    node.forEach((item, i) => unknownFields(model, rootObject, item, `${pointer}/${i}`, out));
    return;
  }
  if (node === null || typeof node !== "object") return;
  for (const key of Object.keys(node)) {
    const at = `${pointer}/${escape(key)}`;
    const saved = node[key];
    node[key] = NO_TYPE;
    let errors;
    try {
      errors = schemaErrors(model, rootObject);
    } finally {
      node[key] = saved;
    }
    const known = errors.some((e) => e.instancePath === at || e.instancePath.startsWith(`${at}/`));
    if (known) {
      unknownFields(model, rootObject, saved, at, out);
    } else {
      out.push(`${at}: unknown field "${key}" (not in the schema)`);
    }
  }
}

function check(object) {
  if (object === null || typeof object !== "object" || Array.isArray(object)) {
    return ["not a Kubernetes object (a mapping with apiVersion and kind)"];
  }
  const model = modelOf(object.apiVersion, object.kind);
  if (model === null) {
    return [`no schema for apiVersion ${JSON.stringify(object.apiVersion)} kind ` +
            `${JSON.stringify(object.kind)} in kubernetes-models@${version}`];
  }
  const errors = schemaErrors(model, object).map(
    (e) => `${e.instancePath || "/"}: ${e.message || e.keyword} ${JSON.stringify(e.params)}`);
  const unknown = [];
  unknownFields(model, object, object, "", unknown);
  return [...new Set([...errors, ...unknown])];
}

const input = JSON.parse(readFileSync(0, "utf8"));
const results = input.map(({ where, object }) => ({ where, errors: check(object) }));
process.stdout.write(JSON.stringify({ schemas: `kubernetes-models@${version}`, results }));
