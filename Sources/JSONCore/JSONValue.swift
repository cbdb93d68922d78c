/// A parsed JSON document, the one JSON value of the package: events and channel commands as
/// Herald reads them, the results it writes, FCM's messages, answers and key files. Numbers keep
/// their literal text (a payload is forwarded with exactly the numbers the producer wrote, and
/// integers can be told from fractions); objects keep their members' order.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    /// The number's literal text, as written.
    case number(String)
    case string(String)
    case array([JSONValue])
    /// Members in document order.
    case object([Member])

    /// One member of an object.
    public struct Member: Sendable, Hashable {
        public var name: String
        public var value: JSONValue

        public init(_ name: String, _ value: JSONValue) {
            self.name = name
            self.value = value
        }
    }

    /// The value of member `name` of an object (the last one if repeated); nil otherwise.
    public subscript(name: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.last { $0.name == name }?.value
    }

    /// The text of a string value; nil for any other value.
    public var stringValue: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    /// The members of an object; nil for any other value.
    public var members: [Member]? {
        if case .object(let members) = self { return members }
        return nil
    }

    /// Parses one JSON document (RFC 8259, strict, at most ``JSONParser/maximumDepth`` deep).
    public init(parsing bytes: some Collection<UInt8>) throws(JSONParseError) {
        self = try JSONParser.parse(Array(bytes))
    }

    /// Compact JSON text.
    public func serialized() -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(512)
        write(to: &output)
        return output
    }

    /// Appends the compact JSON text to `output`.
    public func write(to output: inout [UInt8]) {
        switch self {
        case .null: output.append(contentsOf: "null".utf8)
        case .bool(let value): output.append(contentsOf: (value ? "true" : "false").utf8)
        case .number(let text): output.append(contentsOf: text.utf8)
        case .string(let text): JSONString.write(text, to: &output)
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                element.write(to: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let members):
            output.append(UInt8(ascii: "{"))
            for (index, member) in members.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                JSONString.write(member.name, to: &output)
                output.append(UInt8(ascii: ":"))
                member.value.write(to: &output)
            }
            output.append(UInt8(ascii: "}"))
        }
    }
}

/// Why bytes are not a JSON document.
public struct JSONParseError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong.
    public var message: String
    /// Byte offset where parsing stopped.
    public var offset: Int

    public var description: String { "\(message) at byte \(offset)" }
}
