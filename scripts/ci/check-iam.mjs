// Fails when an IAM statement in the packaged template grants Action "*" or
// Resource "*". Every function's role names its actions and resources; a
// wildcard resource is allowed only where AWS offers nothing narrower, and
// then it must be listed here with the reason.
import fs from 'node:fs';

const WILDCARD_RESOURCE_ALLOWED = new Map([
  // (none today)
]);

const file = process.argv[2] ?? '.serverless/cloudformation-template-update-stack.json';
const template = JSON.parse(fs.readFileSync(file, 'utf8'));
const problems = [];
let statements = 0;
for (const [name, resource] of Object.entries(template.Resources)) {
  const documents = [];
  if (resource.Type === 'AWS::IAM::Role') {
    for (const policy of resource.Properties.Policies ?? []) documents.push(policy.PolicyDocument);
  }
  if (resource.Type === 'AWS::IAM::Policy' || resource.Type === 'AWS::IAM::ManagedPolicy') {
    documents.push(resource.Properties.PolicyDocument);
  }
  for (const document of documents) {
    // A statement may be conditional (Fn::If): check both branches.
    const unwrap = (s) => (s?.['Fn::If'] ? s['Fn::If'].slice(1).flatMap(unwrap) : s?.Ref ? [] : [s]);
    for (const statement of [].concat(document.Statement).flatMap(unwrap)) {
      statements++;
      const actions = [].concat(statement.Action ?? []);
      const resources = [].concat(statement.Resource ?? []);
      if (actions.some((a) => a === '*' || a.endsWith(':*'))) {
        problems.push(`${name}: Action ${JSON.stringify(actions)} grants every action`);
      }
      if (resources.includes('*')) {
        const allowed = actions.every((a) => WILDCARD_RESOURCE_ALLOWED.has(a));
        if (!allowed) problems.push(`${name}: Resource "*" for ${JSON.stringify(actions)}`);
      }
    }
  }
}
if (problems.length > 0) {
  console.error(`IAM wildcards in ${file}:\n  ${problems.join('\n  ')}`);
  process.exit(1);
}
console.log(`IAM: ${statements} statements, no Action "*", no Resource "*"`);
