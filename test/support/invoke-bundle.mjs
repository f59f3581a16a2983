// Runs one packaged Lambda bundle the way the Node.js runtime would: import
// the .mjs file, call its `handler` export with an event and a context, print
// `{"node": process.version, "result": ..., "maxRssMb": ...}` as one JSON
// line, so the caller can check which Node ran it and how much memory it took. Usage: node invoke-bundle.mjs <bundle.mjs> <event.json> <budgetMs>
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const [bundle, eventFile, budget] = process.argv.slice(2);
const deadline = Date.now() + Number(budget);
const context = {
  functionName: 'bundle-check',
  functionVersion: '$LATEST',
  awsRequestId: 'bundle-check',
  invokedFunctionArn: 'arn:aws:lambda:us-east-1:000000000000:function:bundle-check',
  memoryLimitInMB: '512',
  getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
};
const { handler } = await import(pathToFileURL(bundle).href);
const result = await handler(JSON.parse(readFileSync(eventFile, 'utf8')), context);
// Peak resident memory of the whole process (kilobytes on Linux).
const maxRssMb = process.resourceUsage().maxRSS / 1024;
process.stdout.write(`${JSON.stringify({ node: process.version, result, maxRssMb })}\n`);
process.exit(0);
