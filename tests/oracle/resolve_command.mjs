// The site's own command builder (src/lib/command-synthesis.js beside the oracle's build-api) for what its
// JSON API does not write: Mooncake composed with pd_cluster, and a deployment composed with an option of the
// page's KV-offload row. Reads a JSON array of cases on stdin
//   {recipe: "<file>", hf_id, variant, hardware, strategy, features: [...], node_count, pd_nodes, kv,
//    instances: {count, current}}
// (`kv`: a KV store or a KV-offload option, resolveCommand's kvOffload) and prints, per case, what
// resolveCommand gives: every node's argv, the environment and the companion commands; under pd_cluster each
// pool's rank-0 argv and env and the router's command; for a KV store, instance `current`'s nodes and
// environment and the router's command. Usage: node resolve_command.mjs ORACLE_DIR TREE < cases
import fs from "fs";
import path from "path";

const [oracle, tree] = process.argv.slice(2);
const yaml = (await import(path.join(oracle, "node_modules/js-yaml/dist/js-yaml.mjs"))).default;
const { resolveCommand } = await import(path.join(oracle, "src/lib/command-synthesis.js"));

// As build-recipes-api.mjs reads the tree: js-yaml, dates back to YYYY-MM-DD.
const normalizeDates = (value) => {
  if (value instanceof Date) return value.toISOString().split("T")[0];
  if (Array.isArray(value)) return value.map(normalizeDates);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, normalizeDates(v)]));
  }
  return value;
};
const read = (file) => normalizeDates(yaml.load(fs.readFileSync(file, "utf8")));
const taxonomy = read(path.join(tree, "taxonomy.yaml"));
const strategies = {};
for (const folder of ["strategies", "kv_store"]) {
  for (const name of fs.readdirSync(path.join(tree, folder)).filter((f) => f.endsWith(".yaml"))) {
    const spec = read(path.join(tree, folder, name));
    strategies[spec.name] = spec;
  }
}
const cases = JSON.parse(fs.readFileSync(0, "utf8"));
const recipes = new Map();
const results = cases.map((c) => {
  if (!recipes.has(c.recipe)) recipes.set(c.recipe, { ...read(c.recipe), hf_id: c.hf_id });
  const result = resolveCommand(
    recipes.get(c.recipe), c.variant, c.strategy, c.hardware, c.features, strategies, taxonomy, [],
    c.node_count, c.pd_nodes ?? null, {}, c.kv, c.instances ?? null,
  );
  if (result.deployType === "kv_store_lb") {
    const nodes = [result.vllm.argv, ...(result.vllm.workerArgvs ?? [])];
    return { nodes, env: result.vllm.env, router: result.router?.command ?? null };
  }
  if (result.deployType === "pd_cluster") {
    const pool = (role) => ({ argv: result[role].argv, env: result[role].env });
    return { prefill: pool("prefill"), decode: pool("decode"), router: result.router?.command ?? null };
  }
  const nodes = result.headArgv ? [result.headArgv, ...result.workerArgvs] : [result.argv];
  return { nodes, env: result.env, companions: (result.companions ?? []).map((x) => x.command) };
});
process.stdout.write(JSON.stringify(results));
