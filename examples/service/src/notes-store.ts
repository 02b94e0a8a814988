/**
 * The notes, in the kit's own database (tables beside the kit's `kit_*` tables), keyed by the
 * kit's account id: it survives key rotation, so an agent keeps its notes when its DID changes.
 * Pins live in a table of their own, so that databases made before pins keep working as they are.
 */
import { randomBytes } from "node:crypto";
import type { KyselyKitStore } from "@proto/kit";

interface NotesTable {
  id: string;
  account_id: string;
  text: string;
  created_at: number;
}

/** One row per pinned note: what was paid for it, and when. */
interface NotePinsTable {
  note_id: string;
  account_id: string;
  amount: number;
  currency: string;
  pinned_at: number;
}

export interface Note {
  id: string;
  accountId: string;
  text: string;
  /** Milliseconds since the epoch. */
  createdAt: number;
  pinned: boolean;
}

/** A pin as it was paid for. */
export interface Pin {
  noteId: string;
  amount: number;
  currency: string;
  /** Milliseconds since the epoch. */
  pinnedAt: number;
}

function notesDatabase(store: KyselyKitStore) {
  return store.db.withTables<{ notes: NotesTable; note_pins: NotePinsTable }>();
}

type NotesDatabase = ReturnType<typeof notesDatabase>;

/** At most this many notes (pinned first, then the newest) are returned for one account. */
export const NOTES_LIST_LIMIT = 200;
/** Longer ids are no note's (ours are `note_` and 16 characters): refused without a query. */
const MAX_NOTE_ID_LENGTH = 64;

export class NotesStore {
  readonly #db: NotesDatabase;

  private constructor(db: NotesDatabase) {
    this.#db = db;
  }

  /** Creates the tables when they are missing (idempotent, safe from every replica). */
  static async open(store: KyselyKitStore): Promise<NotesStore> {
    const db = notesDatabase(store);
    const time = store.engine === "sqlite" ? "integer" : "bigint";
    await db.schema
      .createTable("notes")
      .ifNotExists()
      .addColumn("id", "text", (column) => column.primaryKey())
      .addColumn("account_id", "text", (column) => column.notNull())
      .addColumn("text", "text", (column) => column.notNull())
      .addColumn("created_at", time, (column) => column.notNull())
      .execute();
    await db.schema
      .createIndex("notes_account_created")
      .ifNotExists()
      .on("notes")
      .columns(["account_id", "created_at"])
      .execute();
    await db.schema
      .createTable("note_pins")
      .ifNotExists()
      .addColumn("note_id", "text", (column) => column.primaryKey())
      .addColumn("account_id", "text", (column) => column.notNull())
      .addColumn("amount", time, (column) => column.notNull())
      .addColumn("currency", "text", (column) => column.notNull())
      .addColumn("pinned_at", time, (column) => column.notNull())
      .execute();
    return new NotesStore(db);
  }

  async add(accountId: string, text: string, now: number): Promise<Note> {
    const note: Note = {
      id: `note_${randomBytes(12).toString("base64url")}`,
      accountId,
      text,
      createdAt: now,
      pinned: false,
    };
    await this.#db.insertInto("notes").values({ id: note.id, account_id: accountId, text, created_at: now }).execute();
    return note;
  }

  /** The account's notes: pinned ones first, each group newest first. */
  async list(accountId: string, limit = NOTES_LIST_LIMIT): Promise<Note[]> {
    const rows = await this.#db
      .selectFrom("notes")
      .leftJoin("note_pins", "note_pins.note_id", "notes.id")
      .select(["notes.id", "notes.account_id", "notes.text", "notes.created_at", "note_pins.pinned_at"])
      .where("notes.account_id", "=", accountId)
      .orderBy((eb) => eb.case().when("note_pins.note_id", "is", null).then(1).else(0).end())
      .orderBy("notes.created_at", "desc")
      .orderBy("notes.id", "desc")
      .limit(limit)
      .execute();
    return rows.map((row) => ({
      id: row.id,
      accountId: row.account_id,
      text: row.text,
      createdAt: Number(row.created_at),
      pinned: row.pinned_at !== null,
    }));
  }

  /** One note of the account; undefined when it has none of that id (another account's included). */
  async find(accountId: string, id: string): Promise<Note | undefined> {
    if (id.length > MAX_NOTE_ID_LENGTH) return undefined;
    const row = await this.#db
      .selectFrom("notes")
      .leftJoin("note_pins", "note_pins.note_id", "notes.id")
      .select(["notes.id", "notes.account_id", "notes.text", "notes.created_at", "note_pins.pinned_at"])
      .where("notes.account_id", "=", accountId)
      .where("notes.id", "=", id)
      .executeTakeFirst();
    if (row === undefined) return undefined;
    return {
      id: row.id,
      accountId: row.account_id,
      text: row.text,
      createdAt: Number(row.created_at),
      pinned: row.pinned_at !== null,
    };
  }

  /** The pin of one of the account's notes, if it is pinned. */
  async findPin(accountId: string, noteId: string): Promise<Pin | undefined> {
    if (noteId.length > MAX_NOTE_ID_LENGTH) return undefined;
    const row = await this.#db
      .selectFrom("note_pins")
      .selectAll()
      .where("account_id", "=", accountId)
      .where("note_id", "=", noteId)
      .executeTakeFirst();
    return row === undefined ? undefined : toPin(row);
  }

  /**
   * Pins a note once it is paid for. Pinning a pinned note keeps the first pin (a retry after the
   * payment went through, or two requests at once), which is answered.
   */
  async pin(accountId: string, noteId: string, paid: { amount: number; currency: string }, now: number): Promise<Pin> {
    await this.#db
      .insertInto("note_pins")
      .values({ note_id: noteId, account_id: accountId, amount: paid.amount, currency: paid.currency, pinned_at: now })
      .onConflict((conflict) => conflict.column("note_id").doNothing())
      .execute();
    const pin = await this.findPin(accountId, noteId);
    if (pin === undefined) throw new Error(`the pin of ${noteId} vanished as it was written`);
    return pin;
  }

  /** Deletes one of the account's notes (and its pin); false when it has none of that id. */
  async remove(accountId: string, id: string): Promise<boolean> {
    if (id.length > MAX_NOTE_ID_LENGTH) return false;
    return this.#db.transaction().execute(async (trx) => {
      const deleted = await trx
        .deleteFrom("notes")
        .where("account_id", "=", accountId)
        .where("id", "=", id)
        .executeTakeFirst();
      await trx.deleteFrom("note_pins").where("account_id", "=", accountId).where("note_id", "=", id).execute();
      return Number(deleted.numDeletedRows) > 0;
    });
  }

  /** Deletes every note of the account (and their pins); answers how many there were. */
  async removeAll(accountId: string): Promise<number> {
    return this.#db.transaction().execute(async (trx) => {
      const deleted = await trx.deleteFrom("notes").where("account_id", "=", accountId).executeTakeFirst();
      await trx.deleteFrom("note_pins").where("account_id", "=", accountId).execute();
      return Number(deleted.numDeletedRows);
    });
  }
}

function toPin(row: NotePinsTable): Pin {
  return {
    noteId: row.note_id,
    amount: Number(row.amount),
    currency: row.currency,
    pinnedAt: Number(row.pinned_at),
  };
}
