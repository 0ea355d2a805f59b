// Drives POST /ag-ui with the protocol's own client, @ag-ui/client's HttpAgent, as a front end
// does: one agent (one thread) through the turns of a scenario read as JSON from stdin; prints
// what the client saw, as JSON, on stdout. Run by tests/agui/test_real_client.py.
//
// A turn: {runId, message?, tools?, forwardedProps?, answer?: "approve" | "reject" | {result},
//          abortAfter?: EVENT_TYPE}. `answer` resolves every interrupt the previous turn ended
// with (a frontend tool's result goes in a tool message, as CopilotKit sends it).
import { HttpAgent } from "@ag-ui/client";

const read = async () => {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
};

const scenario = await read();
const agent = new HttpAgent({
  url: scenario.url,
  headers: scenario.headers ?? {},
  threadId: scenario.threadId,
});
const turns = [];
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
  const events = [];
  let result;
  let error = null;
  const run = agent.runAgent(
    {
      runId: turn.runId,
      tools: turn.tools ?? [],
      forwardedProps: turn.forwardedProps ?? {},
      ...(resume !== undefined ? { resume } : {}),
    },
    {
      onEvent: ({ event }) => {
        events.push(event);
        if (turn.abortAfter !== undefined && event.type === turn.abortAfter) agent.abortRun();
      },
    },
  );
  try {
    result = (await run).result;
  } catch (e) {
    error = String(e?.message ?? e);
  }
  turns.push({
    runId: turn.runId,
    events,
    result: result ?? null,
    error,
    pendingInterrupts: agent.pendingInterrupts,
    messages: agent.messages,
  });
}
process.stdout.write(JSON.stringify(turns));
