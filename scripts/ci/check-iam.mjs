// Fails when an IAM statement in the packaged template grants Action "*" or
// Resource "*". Every function's role names its actions and resources; a
// wildcard resource is allowed only where AWS offers nothing narrower, and
// then it must be listed here with the reason.
//
// Managed policies attached to a role (ManagedPolicyArns) count too:
// - one defined in the template (a Ref to an AWS::IAM::ManagedPolicy) is
//   checked like any inline policy;
// - an AWS-managed one (arn:<partition>:iam::aws:policy/...) is looked up in
//   AWS_MANAGED below, which says what it grants. One that grants Resource "*"
//   fails unless it is attached under a condition its entry names (the VPC
//   policy only when a VPC is configured); one not listed fails until someone
//   reads it and lists it.
import fs from 'node:fs';

const WILDCARD_RESOURCE_ALLOWED = new Map([
  // (none today)
]);

// What AWS-managed policies grant (as AWS publishes them), by the ARN's path
// after "policy/". `onlyUnder`: the template conditions under which a policy
// granting Resource "*" may be attached.
const AWS_MANAGED = new Map([
  [
    'service-role/AWSLambdaVPCAccessExecutionRole',
    {
      actions: [
        'logs:CreateLogGroup',
        'logs:CreateLogStream',
        'logs:PutLogEvents',
        'ec2:CreateNetworkInterface',
        'ec2:DescribeNetworkInterfaces',
        'ec2:DescribeSubnets',
        'ec2:DeleteNetworkInterface',
        'ec2:AssignPrivateIpAddresses',
        'ec2:UnassignPrivateIpAddresses',
      ],
      wildcardResource: true,
      // Lambda needs the ENI actions, on "*", to place a function in a VPC;
      // without a VPC they only widen the role.
      onlyUnder: ['HasVpc'],
    },
  ],
  [
    'service-role/AWSLambdaBasicExecutionRole',
    {
      actions: ['logs:CreateLogGroup', 'logs:CreateLogStream', 'logs:PutLogEvents'],
      wildcardResource: true,
      onlyUnder: [],
    },
  ],
]);

/** The statements of a policy document, both branches of a conditional (Fn::If) one. */
function statementsOf(document) {
  const unwrap = (s) => (s?.['Fn::If'] ? s['Fn::If'].slice(1).flatMap(unwrap) : s?.Ref ? [] : [s]);
  return [].concat(document?.Statement ?? []).flatMap(unwrap);
}

/**
 * The managed policy ARNs of a role, each with the conditions it is attached
 * under: `{ arn, ref, conditions }`, arn a string (Fn::Sub resolved with a
 * placeholder partition) or ref the logical id of a policy in the template.
 */
function managedPolicies(list, conditions = []) {
  const out = [];
  for (const item of [].concat(list ?? [])) {
    if (item?.['Fn::If']) {
      const [condition, yes, no] = item['Fn::If'];
      out.push(...managedPolicies([yes], [...conditions, condition]));
      out.push(...managedPolicies([no], [...conditions, `!${condition}`]));
    } else if (item?.Ref === 'AWS::NoValue') {
      // nothing attached
    } else if (item?.Ref) {
      out.push({ ref: item.Ref, conditions });
    } else if (typeof item === 'string') {
      out.push({ arn: item, conditions });
    } else if (item?.['Fn::Sub'] !== undefined) {
      const text = [].concat(item['Fn::Sub'])[0];
      out.push({ arn: String(text).replaceAll('${AWS::Partition}', 'aws'), conditions });
    } else {
      out.push({ unknown: JSON.stringify(item), conditions });
    }
  }
  return out;
}

export function checkTemplate(template) {
  const problems = [];
  let statements = 0;
  let managed = 0;
  const resources = template.Resources ?? {};
  const check = (name, document) => {
    for (const statement of statementsOf(document)) {
      statements++;
      const actions = [].concat(statement.Action ?? []);
      const targets = [].concat(statement.Resource ?? []);
      if (actions.some((a) => a === '*' || (typeof a === 'string' && a.endsWith(':*')))) {
        problems.push(`${name}: Action ${JSON.stringify(actions)} grants every action`);
      }
      if (targets.includes('*')) {
        const allowed = actions.every((a) => WILDCARD_RESOURCE_ALLOWED.has(a));
        if (!allowed) problems.push(`${name}: Resource "*" for ${JSON.stringify(actions)}`);
      }
    }
  };
  for (const [name, resource] of Object.entries(resources)) {
    if (resource.Type === 'AWS::IAM::Role') {
      for (const policy of resource.Properties?.Policies ?? []) check(name, policy.PolicyDocument);
      for (const attached of managedPolicies(resource.Properties?.ManagedPolicyArns)) {
        managed++;
        const where = attached.conditions.length ? ` (under ${attached.conditions.join(', ')})` : '';
        if (attached.unknown) {
          problems.push(`${name}: a managed policy ARN the check cannot read: ${attached.unknown}`);
          continue;
        }
        if (attached.ref) {
          const policy = resources[attached.ref];
          if (policy?.Type !== 'AWS::IAM::ManagedPolicy') {
            problems.push(`${name}: managed policy ${attached.ref} is not an AWS::IAM::ManagedPolicy of the template`);
          }
          // Its document is checked below, as a resource of its own.
          continue;
        }
        const awsManaged = /^arn:aws[a-z-]*:iam::aws:policy\/(.+)$/.exec(attached.arn);
        if (!awsManaged) {
          problems.push(`${name}: managed policy ${attached.arn} is outside the template: the check cannot read it`);
          continue;
        }
        const known = AWS_MANAGED.get(awsManaged[1]);
        if (!known) {
          problems.push(
            `${name}: AWS-managed policy ${awsManaged[1]}${where} is not in scripts/ci/check-iam.mjs's list: read what it grants and list it`,
          );
          continue;
        }
        if (known.wildcardResource) {
          const conditioned = attached.conditions.some((c) => known.onlyUnder.includes(c));
          if (!conditioned) {
            problems.push(
              `${name}: AWS-managed policy ${awsManaged[1]}${where} grants Resource "*" for ${JSON.stringify(known.actions)}` +
                (known.onlyUnder.length ? `; attach it only under ${known.onlyUnder.join(' or ')}` : ''),
            );
          }
        }
      }
    }
    if (resource.Type === 'AWS::IAM::Policy' || resource.Type === 'AWS::IAM::ManagedPolicy') {
      check(name, resource.Properties?.PolicyDocument);
    }
  }
  return { problems, statements, managed };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const file = process.argv[2] ?? '.serverless/cloudformation-template-update-stack.json';
  const { problems, statements, managed } = checkTemplate(JSON.parse(fs.readFileSync(file, 'utf8')));
  if (problems.length > 0) {
    console.error(`IAM wildcards in ${file}:\n  ${problems.join('\n  ')}`);
    process.exit(1);
  }
  console.log(
    `IAM: ${statements} statements and ${managed} managed policy attachments, no Action "*", no Resource "*" (AWS-managed policies granting "*" only under their conditions)`,
  );
}
