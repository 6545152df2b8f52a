// Following an invocation live: its Server-Sent Events.

import { Unauthorized, api } from "../../common.js";

// Server-Sent Events read with fetch, so the bearer token can go with them.
export async function follow(id, addEntry, addChunk, refresh, signal) {
  // The id of the last event taken: a reconnection asks for what came after it (Last-Event-ID),
  // so that a streamed answer cut off mid-way goes on where it stopped, nothing lost or doubled.
  let lastId = null;
  while (!signal.aborted) {
    let finished = false;
    try {
      const headers = lastId === null ? {} : { "Last-Event-ID": lastId };
      const response = await api("/invocations/" + encodeURIComponent(id) + "/events", { raw: true, signal, headers });
      if (!response.ok && response.status < 500) return;  // gone (404): nothing to follow
      if (!response.ok) throw new Error("HTTP " + response.status);  // starting again: try again soon
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let name = "message", data = "", eventId = null;
          for (const line of block.split("\n")) {
            if (line.startsWith("event: ")) name = line.slice(7);
            else if (line.startsWith("data: ")) data += line.slice(6);
            else if (line.startsWith("id: ")) eventId = line.slice(4);
          }
          const payload = JSON.parse(data);
          if (name === "entry") addEntry(payload, true);
          else if (name === "chunk") addChunk(payload);
          else if (name === "status") await refresh();
          else if (name === "end") { finished = true; await refresh(); }
          if (eventId !== null) lastId = eventId;
        }
      }
    } catch (error) {
      if (error instanceof Unauthorized || signal.aborted) return;
    }
    if (finished || signal.aborted) return;
    await new Promise((resolve) => setTimeout(resolve, 1000));  // the server restarted: follow again
  }
}
