/**
 * scripts/ci/check-iam.mjs reads managed policies as well as inline ones
 * (issue 34): an AWS-managed policy granting Resource "*" fails unless it is
 * attached under the condition that needs it (the VPC policy under HasVpc).
 */
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain ES module without types (the CI script itself).
import { checkTemplate } from '../../scripts/ci/check-iam.mjs';

const vpcPolicy = {
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a CloudFormation Fn::Sub, not JavaScript
  'Fn::Sub': 'arn:${AWS::Partition}:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole',
};
const role = (managed: unknown[], statements: unknown[] = []) => ({
  Resources: {
    FnRole: {
      Type: 'AWS::IAM::Role',
      Properties: {
        ManagedPolicyArns: managed,
        Policies: [{ PolicyName: 'p', PolicyDocument: { Statement: statements } }],
      },
    },
  },
});
const problems = (template: unknown) => (checkTemplate(template) as { problems: string[] }).problems;

describe('check-iam.mjs', () => {
  it('fails on the VPC policy attached unconditionally (as every role had it before issue 34)', () => {
    expect(problems(role([vpcPolicy]))).toEqual([
      expect.stringMatching(
        /FnRole: AWS-managed policy service-role\/AWSLambdaVPCAccessExecutionRole grants Resource "\*".*only under HasVpc/,
      ),
    ]);
  });

  it('passes the VPC policy attached only when a VPC is configured', () => {
    expect(problems(role([{ 'Fn::If': ['HasVpc', vpcPolicy, { Ref: 'AWS::NoValue' }] }]))).toEqual([]);
    // ... but not under some other condition.
    expect(problems(role([{ 'Fn::If': ['HasKmsKey', vpcPolicy, { Ref: 'AWS::NoValue' }] }]))).toHaveLength(1);
  });

  it('fails on AWSLambdaBasicExecutionRole (logs actions on "*") and on AWS-managed policies it does not know', () => {
    const basic = 'arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole';
    expect(problems(role([basic]))).toEqual([
      expect.stringMatching(/AWSLambdaBasicExecutionRole grants Resource/),
    ]);
    expect(problems(role(['arn:aws:iam::aws:policy/AdministratorAccess']))).toEqual([
      expect.stringMatching(/AdministratorAccess is not in .*list/),
    ]);
  });

  it('checks the template’s own managed policies and inline statements, both branches of Fn::If', () => {
    const template = role(
      [{ Ref: 'Extra' }],
      [
        {
          'Fn::If': [
            'C',
            { Effect: 'Allow', Action: 'sqs:*', Resource: 'arn:aws:sqs:x' },
            { Ref: 'AWS::NoValue' },
          ],
        },
      ],
    ) as { Resources: Record<string, unknown> };
    template.Resources.Extra = {
      Type: 'AWS::IAM::ManagedPolicy',
      Properties: {
        PolicyDocument: { Statement: [{ Effect: 'Allow', Action: 's3:GetObject', Resource: '*' }] },
      },
    };
    expect(problems(template)).toEqual([
      expect.stringMatching(/FnRole: Action \["sqs:\*"\] grants every action/),
      expect.stringMatching(/Extra: Resource "\*" for \["s3:GetObject"\]/),
    ]);
  });
});
