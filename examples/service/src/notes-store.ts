/**
 * The notes, in the kit's own database (one table beside the kit's `kit_*` tables), keyed by the
 * kit's account id: it survives key rotation, so an agent keeps its notes when its DID changes.
 */
import { randomBytes } from "node:crypto";
import type { KyselyKitStore } from "@proto/kit";

interface NotesTable {
  id: string;
  account_id: string;
  text: string;
  created_at: number;
}

export interface Note {
  id: string;
  accountId: string;
  text: string;
  /** Milliseconds since the epoch. */
  createdAt: number;
}

function notesDatabase(store: KyselyKitStore) {
  return store.db.withTables<{ notes: NotesTable }>();
}

type NotesDatabase = ReturnType<typeof notesDatabase>;

/** At most this many notes (the newest) are returned for one account. */
export const NOTES_LIST_LIMIT = 200;

export class NotesStore {
  readonly #db: NotesDatabase;

  private constructor(db: NotesDatabase) {
    this.#db = db;
  }

  /** Creates the table when it is missing (idempotent, safe from every replica). */
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
    return new NotesStore(db);
  }

  async add(accountId: string, text: string, now: number): Promise<Note> {
    const note: Note = { id: `note_${randomBytes(12).toString("base64url")}`, accountId, text, createdAt: now };
    await this.#db.insertInto("notes").values({ id: note.id, account_id: accountId, text, created_at: now }).execute();
    return note;
  }

  /** The account's notes, newest first. */
  async list(accountId: string, limit = NOTES_LIST_LIMIT): Promise<Note[]> {
    const rows = await this.#db
      .selectFrom("notes")
      .selectAll()
      .where("account_id", "=", accountId)
      .orderBy("created_at", "desc")
      .orderBy("id", "desc")
      .limit(limit)
      .execute();
    return rows.map((row) => ({
      id: row.id,
      accountId: row.account_id,
      text: row.text,
      createdAt: Number(row.created_at),
    }));
  }
}
