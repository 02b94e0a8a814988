/**
 * Pinning a note: a paid action. The agent pays 0.50 EUR under the spend limits its person set
 * (`kit.spend`, docs/authority.md); the spend's reference is the note, so a retry is never paid
 * twice, and a pinned note is answered as it is without asking to pay again.
 */
import type { AgentContext, Kit } from "@proto/kit";
import { ProtoError } from "@proto/protocol";
import type { Note, NotesStore, Pin } from "./notes-store.js";

/** What pinning costs: in cents of the `purchase` permission's currency. */
export const PIN_PRICE = { amount: 50, currency: "EUR" } as const;

export interface Pinned {
  note: Note;
  pin: Pin;
  /** The kit's spend reference (`pin:<note id>`). */
  reference: string;
  /** True when nothing was paid now: the note was pinned (and paid for) before. */
  replayed: boolean;
}

export function noteNotFound(): ProtoError {
  return new ProtoError("notes_not_found", 404, "this account has no note of that id");
}

export async function pinNote(
  kit: Kit,
  notes: NotesStore,
  agent: AgentContext,
  noteId: string,
  now: number,
): Promise<Pinned> {
  const accountId = agent.record.id;
  const note = await notes.find(accountId, noteId);
  if (note === undefined) throw noteNotFound();
  const reference = `pin:${note.id}`;
  const pinned = await notes.findPin(accountId, note.id);
  if (pinned !== undefined) return { note, pin: pinned, reference, replayed: true };
  // Paid first, pinned after: a pin that failed to be written is written on the retry, whose
  // spend (the same reference) answers the first one and counts nothing.
  const spent = await kit.spend(agent, { ...PIN_PRICE, reference });
  const pin = await notes.pin(accountId, note.id, { amount: spent.amount, currency: spent.currency }, now);
  return { note: { ...note, pinned: true }, pin, reference, replayed: spent.replayed };
}
