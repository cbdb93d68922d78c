package import NIOCore

/// The header table size Herald's encoders use at most: the HTTP/2 default of
/// SETTINGS_HEADER_TABLE_SIZE (RFC 7540 section 6.5.2).
package enum HPACKTable {
    package static let defaultSize = 4_096
}

/// HPACK literals as Herald's header encoders write them (RFC 7541): no Huffman coding.
extension ByteBuffer {
    /// An integer with an N-bit prefix (RFC 7541 section 5.1); `flags` fills the first byte's other bits.
    package mutating func writeHPACKInteger(_ value: Int, prefixBits: Int, flags: UInt8) {
        let limit = (1 << prefixBits) - 1
        guard value >= limit else {
            writeInteger(flags | UInt8(value))
            return
        }
        writeInteger(flags | UInt8(limit))
        var rest = value - limit
        while rest >= 128 {
            writeInteger(UInt8(truncatingIfNeeded: rest) | 0b1000_0000)
            rest >>= 7
        }
        writeInteger(UInt8(rest))
    }

    /// A string literal without Huffman coding (section 5.2).
    package mutating func writeHPACKString(_ string: String) {
        writeHPACKInteger(string.utf8.count, prefixBits: 7, flags: 0)
        writeString(string)
    }
}
