// Drives POST /ag-ui with the protocol's own client, @ag-ui/client's HttpAgent, as a front end
// does: one agent (one thread) through the turns of a scenario read as JSON from stdin; prints
// what the client saw, as JSON, on stdout. Run by tests/agui/test_real_client.py.
//
// A turn: {runId, message?, tools?, forwardedProps?, answer?: "approve" | "reject" | {result},
//          copilotkit?: {answer: "approve" | "reject", payload?}, abortAfter?: EVENT_TYPE}.
// `answer` resolves every interrupt the previous turn ended with (a frontend tool's result goes
// in a tool message). `copilotkit` answers them as CopilotKit's `useInterrupt` does (v2:
// packages/core/src/interrupt-state.ts and react-core's use-interrupt.tsx, through its runtime's
// HttpAgent): `resolve(payload)` or `cancel()` on each, the resume array built by the client's
// own `buildResumeArray`, a tool message per `tool_call` interrupt, and the run sent with the
// runId of the turn that ended on the interrupts (a turn's runId is then optional).
import { HttpAgent, buildResumeArray, randomUUID } from "@ag-ui/client";

const read = async () => {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
};

const scenario = await read();
const bodies = []; // what the client POSTed, turn by turn
const agent = new HttpAgent({
  url: scenario.url,
  headers: scenario.headers ?? {},
  threadId: scenario.threadId,
  fetch: (url, init) => {
    bodies.push(JSON.parse(init.body));
    return fetch(url, init);
  },
});
const turns = [];
const interruptRunIds = new Map(); // each interrupt: the runId of the turn that ended on it

// CopilotKit's answer to every pending interrupt: its resume array and the runId it sends.
const copilotkitAnswer = ({ answer, payload }) => {
  const interrupts = agent.pendingInterrupts;
  const responses = {};
  for (const interrupt of interrupts) {
    responses[interrupt.id] =
      answer === "reject"
        ? { status: "cancelled" }
        : { status: "resolved", payload: payload ?? { approved: true } };
  }
  const resume = buildResumeArray([...interrupts], responses);
  for (const interrupt of interrupts) {
    if (!interrupt.toolCallId || interrupt.reason !== "tool_call") continue;
    const response = responses[interrupt.id];
    const content =
      response.status === "cancelled"
        ? JSON.stringify({ status: "cancelled" })
        : JSON.stringify(response.payload ?? { status: "resolved" });
    agent.addMessage({ id: randomUUID(), role: "tool", toolCallId: interrupt.toolCallId, content });
  }
  const runId = resume
    .map((entry) => interruptRunIds.get(entry.interruptId))
    .find((candidate) => candidate !== undefined);
  return { resume, runId };
};

for (const [index, turn] of scenario.turns.entries()) {
  if (turn.message !== undefined) {
    agent.addMessage({ id: `user-${index}`, role: "user", content: turn.message });
  }
  let resume;
  if (turn.answer !== undefined) {
    resume = agent.pendingInterrupts.map((interrupt) => {
      const kind = interrupt.metadata?.finishline?.kind;
      if (kind === "client_tool" && typeof turn.answer === "object") {
        agent.addMessage({
          id: `tool-${index}-${interrupt.id}`,
          role: "tool",
          toolCallId: interrupt.toolCallId,
          content: turn.answer.result,
        });
        return { interruptId: interrupt.id, status: "resolved" };
      }
      if (turn.answer === "reject") return { interruptId: interrupt.id, status: "cancelled" };
      return { interruptId: interrupt.id, status: "resolved", payload: { approve: true } };
    });
  }
  let runId = turn.runId;
  if (turn.copilotkit !== undefined) {
    ({ resume, runId } = copilotkitAnswer(turn.copilotkit));
  }
  const events = [];
  const posted = bodies.length;
  let result;
  let error = null;
  const run = agent.runAgent(
    {
      runId,
      tools: turn.tools ?? [],
      forwardedProps: turn.forwardedProps ?? {},
      ...(resume !== undefined ? { resume } : {}),
    },
    {
      onEvent: ({ event }) => {
        events.push(event);
        if (turn.abortAfter !== undefined && event.type === turn.abortAfter) agent.abortRun();
      },
      onRunFinishedEvent: (params) => {
        if (params.outcome !== "interrupt") return;
        for (const interrupt of params.interrupts) {
          interruptRunIds.set(interrupt.id, params.input.runId);
        }
      },
    },
  );
  try {
    result = (await run).result;
  } catch (e) {
    error = String(e?.message ?? e);
  }
  turns.push({
    runId,
    body: bodies.length > posted ? bodies.at(-1) : null,
    events,
    result: result ?? null,
    error,
    pendingInterrupts: agent.pendingInterrupts,
    messages: agent.messages,
  });
}
process.stdout.write(JSON.stringify(turns));
