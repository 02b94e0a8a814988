/**
 * A `createKit` option the kit cannot start with. The message names the option's path
 * (`attestors["proto-trust"].url`, `publicUrl`), why it is refused and what to write instead, so a
 * service can print it on one line and stop, without a stack trace, and the person still knows
 * everything.
 */
export class KitConfigError extends Error {
  override readonly name: string = "KitConfigError";
  /** The option refused, as a path into the options object (`publicUrl`, `discovery.service_did`). */
  readonly option: string;

  constructor(option: string, message: string) {
    super(message);
    this.option = option;
  }
}
