use tasks::{step, workflow};

#[workflow]
struct Checkout {
    order: u64,
}

#[step]
const CHARGE: u64 = 1;

fn main() {}
