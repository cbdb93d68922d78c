import JSONCore
import Testing

/// The package's one JSON value, parser and string writer, checked against RFC 8259 directly
/// (until now only through the events, answers and results that use them).
@Suite struct JSONCoreTests {
    private func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        try JSONParser.parse(Array(text.utf8))
    }

    @Test func numbersKeepTheirLiteralTextAndObjectsTheirMembersOrder() throws {
        let value = try parse(#" {"b": 1.50, "a": -0, "c": 12345678901234567890123, "d": 1e-7} "#)
        #expect(value.members?.map(\.name) == ["b", "a", "c", "d"])
        #expect(value["b"] == .number("1.50"), "not 1.5: a payload is forwarded as the producer wrote it")
        #expect(value["c"] == .number("12345678901234567890123"), "beyond Int64 and Double, unchanged")
        #expect(String(decoding: value.serialized(), as: UTF8.self) == #"{"b":1.50,"a":-0,"c":12345678901234567890123,"d":1e-7}"#)
    }

    @Test(arguments: [
        "", "   ", "{", "[1,]", #"{"a":1,}"#, "01", "1.", ".5", "-", "1e", "+1", "NaN", "tru", "nul",
        #"{"a" 1}"#, #"{a:1}"#, "'x'", #""\x""#, #""\u12""#, "[1] [2]", #""a"#,
    ])
    func malformedDocumentsAreRefusedWithAnOffset(_ text: String) {
        #expect(throws: JSONParseError.self, "\(text)") { try parse(text) }
    }

    @Test func controlCharactersAndInvalidUTF8InStringsAreRefused() {
        #expect(throws: JSONParseError.self) { try parse("\"a\u{01}b\"") }
        #expect(throws: JSONParseError.self) { try JSONParser.parse([0x22, 0xC3, 0x28, 0x22]) }
        #expect(throws: JSONParseError.self) { try JSONParser.parse([0x22, 0xED, 0xA0, 0x80, 0x22]) }
    }

    @Test func escapesAndSurrogatePairsDecode() throws {
        #expect(try parse(#""\"\\\/\b\f\n\r\t""#) == .string("\"\\/\u{08}\u{0C}\n\r\t"))
        #expect(try parse(#""\u00e9\ud83d\ude00""#) == .string("é😀"))
        #expect(throws: JSONParseError.self, "a lone high surrogate") { try parse(#""\ud83d""#) }
    }

    @Test func nestingStopsAtTheLimitInsteadOfExhaustingTheStack() throws {
        let depth = JSONParser.maximumDepth
        _ = try parse(String(repeating: "[", count: depth - 1) + String(repeating: "]", count: depth - 1))
        let tooDeep = String(repeating: "[", count: depth + 1) + String(repeating: "]", count: depth + 1)
        #expect(throws: JSONParseError.self) { try parse(tooDeep) }
        let hostile = String(repeating: "[", count: 100_000)
        #expect(throws: JSONParseError.self) { try parse(hostile) }
    }

    @Test func serializationRoundTripsAndEscapesControlCharacters() throws {
        let value = JSONValue.object([
            .init("text", .string("line\nbreak \"quoted\" \\ tab\t bell\u{07} é")),
            .init("list", .array([.null, .bool(true), .bool(false), .number("3")])),
        ])
        let written = String(decoding: value.serialized(), as: UTF8.self)
        #expect(written == #"{"text":"line\nbreak \"quoted\" \\ tab\t bell\u0007 é","list":[null,true,false,3]}"#)
        #expect(try JSONParser.parse(value.serialized()) == value)
    }

    /// Results name every field of the contract, absent ones as `null`.
    @Test func theObjectWriterWritesAbsentValuesAsNull() throws {
        var writer = JSONObjectWriter()
        writer.member("id", "e-1")
        writer.member("missing", String?.none)
        writer.member("count", 42)
        writer.member("absent", Int?.none)
        let bytes = writer.finished()
        #expect(String(decoding: bytes, as: UTF8.self) == #"{"id":"e-1","missing":null,"count":42,"absent":null}"#)
        #expect(try JSONParser.parse(bytes)["count"] == .number("42"))
    }
}
