import NIOCore

/// HTTP/2 framing (RFC 9113 sections 4 and 6) as Herald's clients need it: the frame layout,
/// the frame types, flags and settings it reads or writes, and a reader that cuts a byte stream
/// into frames. Stream and connection state live in ``HTTP2ConnectionCore/StateMachine``.
package enum HTTP2Wire {
    /// The client connection preface (RFC 9113 section 3.4).
    static let clientPreface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
    static let frameHeaderLength = 9
    /// SETTINGS_MAX_FRAME_SIZE's initial value, also the largest frame this client accepts.
    static let defaultMaxFrameSize = 16_384
    /// SETTINGS_INITIAL_WINDOW_SIZE's initial value and the initial connection window.
    static let defaultWindowSize = 65_535
    static let maxWindowSize = Int(Int32.max)

    struct FrameType: RawRepresentable, Hashable, Sendable {
        var rawValue: UInt8
        static let data = FrameType(rawValue: 0x0)
        static let headers = FrameType(rawValue: 0x1)
        static let priority = FrameType(rawValue: 0x2)
        static let rstStream = FrameType(rawValue: 0x3)
        static let settings = FrameType(rawValue: 0x4)
        static let pushPromise = FrameType(rawValue: 0x5)
        static let ping = FrameType(rawValue: 0x6)
        static let goAway = FrameType(rawValue: 0x7)
        static let windowUpdate = FrameType(rawValue: 0x8)
        static let continuation = FrameType(rawValue: 0x9)
    }

    struct Flags: OptionSet, Hashable, Sendable {
        var rawValue: UInt8
        /// DATA and HEADERS: the sender's last frame on the stream.
        static let endStream = Flags(rawValue: 0x1)
        /// SETTINGS and PING: an acknowledgement.
        static let ack = Flags(rawValue: 0x1)
        static let endHeaders = Flags(rawValue: 0x4)
        static let padded = Flags(rawValue: 0x8)
        static let priority = Flags(rawValue: 0x20)
    }

    /// SETTINGS parameter identifiers (RFC 9113 section 6.5.2).
    enum Setting {
        static let headerTableSize: UInt16 = 0x1
        static let enablePush: UInt16 = 0x2
        static let maxConcurrentStreams: UInt16 = 0x3
        static let initialWindowSize: UInt16 = 0x4
        static let maxFrameSize: UInt16 = 0x5
        static let maxHeaderListSize: UInt16 = 0x6
    }

    /// An HTTP/2 error code (RFC 9113 section 7), named when known.
    package struct ErrorCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        package var rawValue: UInt32

        package init(rawValue: UInt32) { self.rawValue = rawValue }

        static let noError = ErrorCode(rawValue: 0x0)
        static let protocolError = ErrorCode(rawValue: 0x1)
        static let internalError = ErrorCode(rawValue: 0x2)
        static let flowControlError = ErrorCode(rawValue: 0x3)
        static let frameSizeError = ErrorCode(rawValue: 0x6)
        static let cancel = ErrorCode(rawValue: 0x8)
        static let compressionError = ErrorCode(rawValue: 0x9)

        private static let names = [
            "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
            "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR",
            "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED",
        ]

        package var description: String {
            rawValue < Self.names.count ? Self.names[Int(rawValue)] : "error code 0x\(String(rawValue, radix: 16))"
        }
    }

    /// A violation that ends the connection: GOAWAY with `code`, then close.
    struct ConnectionError: Error, CustomStringConvertible {
        var code: ErrorCode
        var detail: String
        var description: String { "\(code): \(detail)" }
    }

    struct Frame {
        var type: FrameType
        var flags: Flags
        var streamID: UInt32
        var payload: ByteBuffer
    }

    /// Cuts the bytes read from the connection into frames; a frame may arrive in several reads.
    struct FrameReader {
        private var pending: ByteBuffer?

        mutating func append(_ bytes: ByteBuffer) {
            if pending == nil || pending!.readableBytes == 0 {
                pending = bytes
            } else {
                var bytes = bytes
                pending!.writeBuffer(&bytes)
            }
        }

        /// The next complete frame, or nil until more bytes arrive.
        mutating func nextFrame() throws(ConnectionError) -> Frame? {
            guard var buffer = pending, buffer.readableBytes >= HTTP2Wire.frameHeaderLength else { return nil }
            let start = buffer.readerIndex
            let lengthHigh = Int(buffer.getInteger(at: start, as: UInt8.self)!)
            let lengthLow = Int(buffer.getInteger(at: start + 1, as: UInt16.self)!)
            let length = lengthHigh << 16 | lengthLow
            guard length <= HTTP2Wire.defaultMaxFrameSize else {
                throw ConnectionError(code: .frameSizeError, detail: "a \(length)-byte frame exceeds the frame size limit")
            }
            guard buffer.readableBytes >= HTTP2Wire.frameHeaderLength + length else { return nil }
            let type = FrameType(rawValue: buffer.getInteger(at: start + 3, as: UInt8.self)!)
            let flags = Flags(rawValue: buffer.getInteger(at: start + 4, as: UInt8.self)!)
            let streamID = buffer.getInteger(at: start + 5, as: UInt32.self)! & 0x7fff_ffff
            buffer.moveReaderIndex(forwardBy: HTTP2Wire.frameHeaderLength)
            let payload = buffer.readSlice(length: length)!
            if buffer.readableBytes == 0 {
                pending = nil
            } else {
                pending = buffer
            }
            return Frame(type: type, flags: flags, streamID: streamID, payload: payload)
        }
    }
}

extension ByteBuffer {
    /// Writes the 9-byte header of a frame whose payload of `length` bytes follows.
    mutating func writeHTTP2FrameHeader(
        length: Int,
        type: HTTP2Wire.FrameType,
        flags: HTTP2Wire.Flags = [],
        streamID: UInt32
    ) {
        writeInteger(UInt8(truncatingIfNeeded: length >> 16))
        writeInteger(UInt16(truncatingIfNeeded: length))
        writeInteger(type.rawValue)
        writeInteger(flags.rawValue)
        writeInteger(streamID & 0x7fff_ffff)
    }

    /// Removes a padded frame's padding (RFC 9113 section 6.1): the length octet and the trailing pad.
    mutating func removeHTTP2Padding(flags: HTTP2Wire.Flags) throws(HTTP2Wire.ConnectionError) {
        guard flags.contains(.padded) else { return }
        guard let padLength = readInteger(as: UInt8.self), Int(padLength) <= readableBytes else {
            throw HTTP2Wire.ConnectionError(code: .protocolError, detail: "padding longer than the frame")
        }
        moveWriterIndex(to: writerIndex - Int(padLength))
    }
}
