//! The start position a receiver asks for, parsed from the selector filter the SDKs attach to a
//! receiver link (`apache.org:selector-filter:string`), e.g. `amqp.annotation.x-opt-offset > '-1'`.
//! Pure: the partition log turns a `StartFilter` into the first sequence number to deliver.

/// Where a receiver starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFilter {
    /// The earliest retained event (`offset > '-1'`).
    Earliest,
    /// Only events enqueued after the link opened (`offset > '@latest'`).
    Latest,
    Offset {
        offset: i64,
        inclusive: bool,
    },
    SequenceNumber {
        sequence: i64,
        inclusive: bool,
    },
    /// Milliseconds since the Unix epoch.
    EnqueuedTime {
        millis: i64,
        inclusive: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error(
        "the selector filter `{0}` is not `amqp.annotation.x-opt-(offset|sequence-number|enqueued-time) >[=] value`"
    )]
    Shape(String),
    #[error("the selector filter `{0}` compares with `{1}`, which is not a number")]
    Value(String, String),
}

const PREFIX: &str = "amqp.annotation.x-opt-";

/// Parses a selector expression. No expression means the start of the partition.
pub fn parse(expression: Option<&str>) -> Result<StartFilter, FilterError> {
    let Some(expression) = expression else {
        return Ok(StartFilter::Earliest);
    };
    let shape = || FilterError::Shape(expression.to_string());
    let rest = expression.trim().strip_prefix(PREFIX).ok_or_else(shape)?;
    let operator_at = rest.find(['>', '<', '=']).ok_or_else(shape)?;
    let field = rest[..operator_at].trim();
    let after = &rest[operator_at..];
    let (inclusive, value) = if let Some(v) = after.strip_prefix(">=") {
        (true, v)
    } else if let Some(v) = after.strip_prefix('>') {
        (false, v)
    } else {
        return Err(shape());
    };
    let value = value.trim().trim_matches('\'').trim();
    let number = || {
        value
            .parse::<i64>()
            .map_err(|_| FilterError::Value(expression.to_string(), value.to_string()))
    };
    match field {
        "offset" if value == "@latest" => Ok(StartFilter::Latest),
        "offset" => {
            let offset = number()?;
            if offset < 0 && !inclusive {
                Ok(StartFilter::Earliest)
            } else {
                Ok(StartFilter::Offset { offset, inclusive })
            }
        }
        "sequence-number" => Ok(StartFilter::SequenceNumber {
            sequence: number()?,
            inclusive,
        }),
        "enqueued-time" => Ok(StartFilter::EnqueuedTime {
            millis: number()?,
            inclusive,
        }),
        _ => Err(shape()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_the_rust_and_python_sdks_send() {
        // Rust SDK: no space between the operator and the quote.
        assert_eq!(
            parse(Some("amqp.annotation.x-opt-offset >'-1'")),
            Ok(StartFilter::Earliest)
        );
        assert_eq!(
            parse(Some("amqp.annotation.x-opt-offset > '@latest'")),
            Ok(StartFilter::Latest)
        );
        assert_eq!(
            parse(Some("amqp.annotation.x-opt-offset >='1200'")),
            Ok(StartFilter::Offset {
                offset: 1200,
                inclusive: true
            })
        );
        // Python SDK quotes numbers too.
        assert_eq!(
            parse(Some("amqp.annotation.x-opt-sequence-number > '41'")),
            Ok(StartFilter::SequenceNumber {
                sequence: 41,
                inclusive: false
            })
        );
        assert_eq!(
            parse(Some("amqp.annotation.x-opt-enqueued-time >= 1700000000000")),
            Ok(StartFilter::EnqueuedTime {
                millis: 1_700_000_000_000,
                inclusive: true
            })
        );
        assert_eq!(parse(None), Ok(StartFilter::Earliest));
    }

    #[test]
    fn refuses_what_it_cannot_honour() {
        assert!(matches!(
            parse(Some("amqp.annotation.x-opt-offset < '5'")),
            Err(FilterError::Shape(_))
        ));
        assert!(matches!(
            parse(Some("sys.to = 'x'")),
            Err(FilterError::Shape(_))
        ));
        assert!(matches!(
            parse(Some("amqp.annotation.x-opt-sequence-number > 'abc'")),
            Err(FilterError::Value(_, _))
        ));
        assert!(matches!(
            parse(Some("amqp.annotation.x-opt-partition-key > '1'")),
            Err(FilterError::Shape(_))
        ));
    }
}
