/// Herald's schema migrations, applied in order and recorded in `push.schema_migrations`.
///
/// The SQL lives in `schemas/migrations/NNNN_name.sql`. `scripts/generate-migrations.sh` copies
/// each file verbatim into `Migrations+SQL.swift`, which is checked in, so the `herald` binary
/// is self-contained: `herald migrate` works from a copied or statically linked binary, with no
/// resource bundle to ship or locate (SwiftPM resources would need `Bundle.module` and a
/// `herald_PostgresStores.resources` directory beside the binary in every image).
/// `MigrationsTests` and `scripts/generate-migrations.sh --check` (in the test command) fail
/// whenever the generated file and `schemas/` disagree.
///
/// A migration is never edited once released: changes come as a new version.
enum Migrations {
    struct Migration: Sendable {
        var version: Int
        var name: String
        /// The file in `schemas/migrations/` this migration was generated from.
        var file: String
        /// The file's text.
        var sql: String

        /// The statements to run one by one (the extended query protocol runs one per query).
        var statements: [String] { SQLScript.statements(sql) }
    }
}

/// Splits SQL scripts into statements.
enum SQLScript {
    /// The statements of `script`, each without its terminating `;`, comments or surrounding
    /// whitespace. Semicolons inside quotes, quoted identifiers, dollar-quoted bodies and
    /// comments do not end a statement.
    static func statements(_ script: String) -> [String] {
        var scanner = Scanner(bytes: Array(script.utf8))
        scanner.scanAll()
        return scanner.statements
    }

    /// The splitter's state while it reads one script, byte by byte.
    private struct Scanner {
        /// The script's UTF-8 bytes.
        let bytes: [UInt8]
        /// The next byte to read.
        var index = 0
        /// The statement read so far, its comments dropped.
        var current: [UInt8] = []
        /// The statements finished so far, in script order.
        var statements: [String] = []

        /// Reads the whole script: a `;` outside quotes and comments ends a statement, and so does the end.
        mutating func scanAll() {
            while index < bytes.count {
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "-") where peek(1) == UInt8(ascii: "-"):
                    skipLineComment()
                case UInt8(ascii: "/") where peek(1) == UInt8(ascii: "*"):
                    skipBlockComment()
                case UInt8(ascii: "'"):
                    copyStringLiteral()
                case UInt8(ascii: "\""):
                    copyThrough([UInt8(ascii: "\"")], from: index + 1)
                case UInt8(ascii: "$") where index == 0 || !SQLScript.isIdentifierByte(bytes[index - 1]):
                    copyDollarQuoteOrSign()
                case UInt8(ascii: ";"):
                    finishStatement()
                    index += 1
                default:
                    current.append(byte)
                    index += 1
                }
            }
            finishStatement()
        }

        /// The byte `offset` past the current one; nil past the end.
        func peek(_ offset: Int) -> UInt8? {
            index + offset < bytes.count ? bytes[index + offset] : nil
        }

        /// Adds the statement read so far, trimmed, unless it is empty, and starts the next.
        mutating func finishStatement() {
            let text = String(decoding: current, as: UTF8.self).trimmingWhitespace()
            if !text.isEmpty { statements.append(text) }
            current.removeAll(keepingCapacity: true)
        }

        /// A line comment: dropped up to (not including) the newline.
        mutating func skipLineComment() {
            while index < bytes.count, bytes[index] != UInt8(ascii: "\n") { index += 1 }
        }

        /// A block comment (PostgreSQL nests them): dropped.
        mutating func skipBlockComment() {
            var depth = 0
            while index < bytes.count {
                if bytes[index] == UInt8(ascii: "/"), peek(1) == UInt8(ascii: "*") {
                    depth += 1
                    index += 2
                } else if bytes[index] == UInt8(ascii: "*"), peek(1) == UInt8(ascii: "/") {
                    depth -= 1
                    index += 2
                    if depth == 0 { break }
                } else {
                    index += 1
                }
            }
        }

        /// A '…' string, copied whole.
        mutating func copyStringLiteral() {
            // E'…' strings take backslash escapes; '' inside any string reads as two strings.
            let previous = index > 0 ? bytes[index - 1] : 0
            let escapes =
                (previous == UInt8(ascii: "E") || previous == UInt8(ascii: "e"))
                && (index < 2 || !SQLScript.isIdentifierByte(bytes[index - 2]))
            copyThrough([UInt8(ascii: "'")], from: index + 1, backslashEscapes: escapes)
        }

        /// A dollar-quoted body, copied whole; or a `$` that opens none, copied alone.
        mutating func copyDollarQuoteOrSign() {
            // $tag$…$tag$ (the tag may be empty); `$1` is a parameter, not a quote.
            var end = index + 1
            while end < bytes.count, SQLScript.isIdentifierByte(bytes[end]), !SQLScript.isDigit(bytes[end]) || end > index + 1 {
                end += 1
            }
            if end < bytes.count, bytes[end] == UInt8(ascii: "$") {
                let delimiter = Array(bytes[index...end])
                copyThrough(delimiter, from: end + 1)
            } else {
                current.append(bytes[index])
                index += 1
            }
        }

        /// Copies up to and including the first `terminator` at or after `from`.
        mutating func copyThrough(_ terminator: [UInt8], from start: Int, backslashEscapes: Bool = false) {
            var position = start
            while position < bytes.count {
                if backslashEscapes, bytes[position] == UInt8(ascii: "\\") {
                    position += 2
                    continue
                }
                if bytes[position...].starts(with: terminator) {
                    position += terminator.count
                    current += bytes[index..<position]
                    index = position
                    return
                }
                position += 1
            }
            current += bytes[index...]
            index = bytes.count
        }
    }

    private static func isIdentifierByte(_ byte: UInt8) -> Bool {
        isDigit(byte) || byte == UInt8(ascii: "_") || byte >= 0x80
            || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20)
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }
}

extension String {
    fileprivate func trimmingWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0.isWhitespace }
        guard let start = firstIndex(where: { !isSpace($0) }), let end = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return String(self[start...end])
    }
}
