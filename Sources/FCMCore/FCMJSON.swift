import APNSCore

/// A JSON value as FCM's messages, answers and key files use it: numbers keep their literal
/// text (so an app's numbers are forwarded as written), objects keep their members' order.
public enum FCMJSON: Sendable, Hashable {
    case null
    case bool(Bool)
    /// The number's literal text, as written.
    case number(String)
    case string(String)
    case array([FCMJSON])
    /// Members in document order.
    case object([Member])

    /// One member of an object.
    public struct Member: Sendable, Hashable {
        public var name: String
        public var value: FCMJSON

        public init(_ name: String, _ value: FCMJSON) {
            self.name = name
            self.value = value
        }
    }

    /// The value of member `name` of an object (the last one if repeated); nil otherwise.
    public subscript(name: String) -> FCMJSON? {
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

    /// Parses one JSON document (RFC 8259, strict, at most ``FCMJSONParser/maximumDepth`` deep).
    public init(parsing bytes: some Collection<UInt8>) throws(FCMJSONParseError) {
        self = try FCMJSONParser.parse(Array(bytes))
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
public struct FCMJSONParseError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong.
    public var message: String
    /// Byte offset where parsing stopped.
    public var offset: Int

    public var description: String { "\(message) at byte \(offset)" }
}
