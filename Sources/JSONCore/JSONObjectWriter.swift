/// Writes one JSON object member by member, straight into its bytes: for the messages Herald
/// writes once per device (results, unregistered tokens), where building a ``JSONValue`` tree
/// and then serializing it cost a tree of allocations per message.
public struct JSONObjectWriter {
    private var output: [UInt8]
    private var hasMembers = false

    /// An empty object, with room for `capacity` bytes.
    public init(capacity: Int = 512) {
        output = []
        output.reserveCapacity(capacity)
        output.append(UInt8(ascii: "{"))
    }

    /// Appends a string member, `null` when `value` is nil. `name` is written as given: a
    /// literal without quotes, backslashes or control characters.
    public mutating func member(_ name: StaticString, _ value: String?) {
        startMember(name)
        guard let value else { return output.append(contentsOf: "null".utf8) }
        JSONString.write(value, to: &output)
    }

    /// Appends an integer member, `null` when `value` is nil.
    public mutating func member(_ name: StaticString, _ value: (some BinaryInteger)?) {
        startMember(name)
        guard let value else { return output.append(contentsOf: "null".utf8) }
        output.append(contentsOf: String(value).utf8)
    }

    /// The object's compact JSON text.
    public consuming func finished() -> [UInt8] {
        output.append(UInt8(ascii: "}"))
        return output
    }

    private mutating func startMember(_ name: StaticString) {
        if hasMembers { output.append(UInt8(ascii: ",")) }
        hasMembers = true
        output.append(UInt8(ascii: "\""))
        name.withUTF8Buffer { output.append(contentsOf: $0) }
        output.append(contentsOf: "\":".utf8)
    }
}
