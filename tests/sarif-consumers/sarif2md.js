// node sarif2md.js IN.sarif OUT.md: @security-alert/sarif-to-markdown (installed by `make
// sarif-tools` into .sarif-tools, passed as NODE_PATH) renders a log as the GitHub comment it
// posts; prints [{hasMessages, shouldFail}] per run for tests/sarif_tools.py to check.
const fs = require('fs');
const path = require('path');
const { sarifToMarkdown } = require('@security-alert/sarif-to-markdown');

const [input, output] = process.argv.slice(2);
const log = JSON.parse(fs.readFileSync(input, 'utf8'));
const runs = sarifToMarkdown({
  title: 'dynamo-onnx: ' + path.basename(input),
  owner: 'OWNER',
  repo: 'REPO',
  branch: 'main',
  sourceRoot: '',
  details: false,
  failOn: ['error'],
})(log);
fs.writeFileSync(output, runs.map((r) => r.body).join('\n\n---\n\n'));
console.log(JSON.stringify(runs.map((r) => ({ hasMessages: r.hasMessages, shouldFail: r.shouldFail }))));
